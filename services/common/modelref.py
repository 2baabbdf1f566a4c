"""Model references as people type them: "name", "name:3" (a version) or "name@alias". One parser, pure (no grpc,
no torch), shared by the CLI (services.common.client.model_ref), the servicers and the predictors
(services.common.serving.parse_model_ref). The name and alias themselves are checked by the registry's one naming
rule where they are used (services.common.params.ModelName); here only the shape is."""
from __future__ import annotations

SHAPE = "expected name, name:VERSION (VERSION >= 1) or name@ALIAS"


def split_model_ref(text: str | None, default_name: str = "") -> tuple[str, int, str]:
    """-> (name, version, alias); version 0 and alias "" when neither is given; empty text -> default_name.
    Raises ValueError naming the text when its shape is wrong."""
    text = (text or "").strip() or default_name
    if "@" in text:
        name, _, alias = text.partition("@")
        if not name or not alias or ":" in alias or "@" in alias:
            raise ValueError(f"model reference {text!r}: {SHAPE}")
        return name, 0, alias
    if ":" in text:
        name, _, ver = text.partition(":")
        if not name or not ver.isdigit() or int(ver) < 1:
            raise ValueError(f"model reference {text!r}: {SHAPE}")
        return name, int(ver), ""
    return text, 0, ""
