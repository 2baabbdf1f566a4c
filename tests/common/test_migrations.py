"""Migrations: common holds the platform's tables, each service its own (services/<svc>/migrations, named by its
spec), applied in one version order. What a service does when its jobs end is a Python hook (JobKind.on_finish),
never a trigger on the shared jobs table: no SQL names a job kind."""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from services import catalog
from services.common import db
from services.common.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _all() -> list[tuple[int, str, str]]:
    return db.migrations(s.migrations for s in catalog.SPECS if s.migrations)


def test_no_sql_names_a_job_kind():
    kinds = list(catalog.job_kinds())
    assert kinds
    for path in ROOT.glob("services/**/migrations/*.sql"):
        text = path.read_text()
        named = [k for k in kinds if f"'{k}'" in text]  # as an SQL string (comments may mention a job)
        assert not named, f"{path.relative_to(ROOT)} names job kind(s) {named}: use the kind's on_finish hook"


def test_each_service_declares_the_folder_it_has():
    for spec in catalog.SPECS:
        folder = ROOT / "services" / spec.name / "migrations"
        has_sql = folder.is_dir() and any(folder.glob("*.sql"))
        assert has_sql == (spec.migrations == f"services.{spec.name}"), spec.name


def test_versions_are_one_ordered_history():
    versions = [v for v, _, _ in _all()]
    assert versions == sorted(set(versions))
    assert {name for _, name, _ in _all()} >= {"0001_init.sql", "0003_unlearning.sql", "0080_generation_documents.sql"}


def test_a_version_used_twice_is_refused(tmp_path, monkeypatch):
    pkg = tmp_path / "twice_pkg"
    (pkg / "migrations").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "migrations" / "0001_again.sql").write_text("SELECT 1;")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="version 1 is used twice"):
        db.migrations(["twice_pkg"])


def test_a_migrated_database_has_nothing_pending_and_no_trigger_on_jobs(database_url):
    assert db.migrate(Settings(database_url=database_url)) == []
    with psycopg.connect(database_url) as conn:
        applied = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        triggers = conn.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'jobs'::regclass "
                                "AND NOT tgisinternal").fetchall()
        kind_functions = conn.execute(
            "SELECT proname FROM pg_proc WHERE prosrc LIKE ANY (%s)",
            ([f"%'{k}'%" for k in catalog.job_kinds()],)).fetchall()
    assert applied == [v for v, _, _ in _all()]
    assert triggers == []
    assert kind_functions == []
