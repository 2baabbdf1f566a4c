"""The artifact store against a real S3 server (SeaweedFS `weed mini`)."""
from __future__ import annotations

import io
import threading
import time

import pytest
import urllib3
from minio.error import S3Error

from services.common.errors import IntegrityError
from services.common.store import transient
from services.common.store import ArtifactStore, blob_key, retry
from tests import harness


@pytest.fixture
def store(settings):
    s = ArtifactStore(settings)
    s.ensure_bucket()
    return s


def test_content_addressed_roundtrip_and_multipart(store, settings):
    small_key, digest = store.put_blob("t1", b"hello", "text/plain")
    assert small_key == blob_key("t1", digest) and store.get_bytes(small_key, digest) == b"hello"
    big = bytes(range(256)) * (settings.s3.multipart_bytes // 256 + 4096)  # > one part: goes up as multipart
    key, digest = store.put_blob("t1", big, "application/octet-stream")
    assert store.get_bytes(key, digest) == big


def test_corruption_behind_the_stores_back_is_detected(store):
    key, digest = store.put_blob("t1", b"original bytes", "text/plain")
    store.client.put_object(store.bucket, key, io.BytesIO(b"tampered bytes"), 14)  # not through the store
    with pytest.raises(IntegrityError):
        store.get_bytes(key, digest)


def test_presigned_urls_are_short_lived_and_scoped(store, settings):
    import urllib.request
    key, _ = store.put_blob("t1", b"shared", "text/plain")
    url = store.presigned_get(key)
    assert f"X-Amz-Expires={settings.s3.presign_seconds}" in url and key in url
    assert urllib.request.urlopen(url, timeout=10).read() == b"shared"
    forged = url.replace(key, blob_key("t2", "0" * 64))  # the signature covers the key
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(forged, timeout=10)


def test_s3_restart_during_upload_is_retried(settings, tmp_path):
    with harness.weed_server(tmp_path / "weed") as weed:
        s = settings.model_copy(deep=True)
        s.s3.endpoint = weed.endpoint
        store = ArtifactStore(s)
        store.ensure_bucket()
        weed.stop()
        result = {}

        def upload():
            result["key"], result["digest"] = store.put_blob("t1", b"survives a restart", "text/plain")
        t = threading.Thread(target=upload)
        t.start()
        time.sleep(1.5)  # the upload is failing and backing off meanwhile
        assert t.is_alive()
        weed.start()
        t.join(60)
        assert store.get_bytes(result["key"], result["digest"]) == b"survives a restart"


def _s3_error(code: str) -> S3Error:
    return S3Error(urllib3.HTTPResponse(status=500), code, "message", "/bucket/key", "rid", "hid")


def test_s3_errors_of_a_server_starting_up_are_retried_and_others_are_not():
    # A SeaweedFS just restarted answers InternalError for a moment: a job writing its result then must not fail.
    answers = [_s3_error("InternalError"), _s3_error("ServiceUnavailable"), "stored"]

    def put():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    assert retry(put, what="put", base_delay=0.01) == "stored"
    assert transient(_s3_error("SlowDown")) and transient(ConnectionRefusedError())

    calls = []

    def denied():
        calls.append(1)
        raise _s3_error("AccessDenied")
    with pytest.raises(S3Error):
        retry(denied, what="put", base_delay=0.01)
    assert len(calls) == 1 and not transient(_s3_error("AccessDenied")) and not transient(ValueError())
