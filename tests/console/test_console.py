"""The web console in a real browser: Playwright driving Debian's Chromium against `praxon console` (a subprocess,
started as a user starts it), the real gRPC platform on loopback and a `praxon worker`. Sign in (a bad token
refused); a job's progress bar moves to done while the page follows WatchJob; cancel behind its confirmation; a
model's lineage after an unlearning job shows the new version's parent and the record on the edge; a campaign's
best-so-far plot loads; a second tenant gets 404 for every page of the first; a revoked token ends the session.
Screenshots of each page go to $PRAXON_TEST_ARTIFACTS/console-screenshots (default build/console-screenshots)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.design.v1 import design_pb2, design_pb2_grpc
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.unlearning.v1 import unlearning_pb2, unlearning_pb2_grpc
from services.common import db
from tests import harness
from tests.harness import auth

CHROMIUM = "/usr/bin/chromium"
# Chromium on a closed network: no sandbox (root in a container), no GPU, and none of its background calls home.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(os.environ.get("PRAXON_TEST_ARTIFACTS") or harness.ROOT / "build") / "console-screenshots"
TIMEOUT_MS = 120_000  # waits on real jobs on a loaded machine; a page that is wrong fails on its assertion


@pytest.fixture(scope="module")
def settings(settings):
    """This module's own database and broker; token lookups not cached, so a revoked token fails at once."""
    with harness.private_platform(settings) as private:
        private.grpc.auth_cache_seconds = 0
        private.grpc.auth_negative_cache_seconds = 0
        yield private


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory):
    suffix = uuid.uuid4().hex[:6]
    tenants = {who: (f"console-{who}-{suffix}", *harness.token_for(settings, f"console-{who}-{suffix}"))
               for who in ("a", "b")}
    server = harness.PlatformServer(settings, ["platform", "unlearning", "design"])
    worker = harness.Worker(settings, tmp_path_factory.mktemp("console-workers"), "default,training,unlearning")
    log = tmp_path_factory.mktemp("console") / "console.log"
    with open(log, "wb") as out:  # a file, not a pipe: nothing has to drain it while the tests run
        console = subprocess.Popen([sys.executable, "-m", "services.cli.main", "console", "--address",
                                    server.address, "--port", "0"], stdout=out, stderr=subprocess.STDOUT,
                                   cwd=harness.ROOT, env={**os.environ, "PYTHONPATH": str(harness.ROOT)})
    channel = grpc.insecure_channel(server.address)
    try:
        said = harness.wait_for(lambda: console.poll() is not None or "\n" in log.read_text() and log.read_text(),
                                60, what="the console's URL")
        url = re.search(r"http://\S+?/", str(said))
        assert url, f"the console said {said!r} (exit {console.poll()})"
        SHOTS.mkdir(parents=True, exist_ok=True)
        yield SimpleNamespace(settings=settings, server=server, channel=channel, tenants=tenants, log=log,
                              url=url.group(0).rstrip("/"), jobs=jobs_pb2_grpc.JobServiceStub(channel))
    finally:
        console.terminate()
        console.wait(20)
        worker.stop()
        channel.close()
        server.stop()


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/bootstrap.sh installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        yield context
        context.close()


@pytest.fixture
def page(browser_context):
    page = browser_context.new_page()
    yield page
    page.close()


def _token(env, who: str) -> str:
    return env.tenants[who][2]


def _sign_in(page, env, token: str):
    page.context.clear_cookies()
    page.goto(f"{env.url}/signin")
    page.fill("input[name=token]", token)
    with page.expect_navigation():
        page.click("button[type=submit]")
    return page


def _shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _upload(env, token: str, name: str, data: bytes, content_type: str) -> str:
    stub = artifacts_pb2_grpc.ArtifactServiceStub(env.channel)
    req = artifacts_pb2.UploadArtifactRequest(name=name, content_type=content_type, chunk=data)
    return stub.UploadArtifact(iter([req]), metadata=auth(token)).artifact.id


def _succeeded(env, token: str, job_id: str, timeout: float = 240):
    job = harness.wait_job(env.jobs, token, job_id, timeout)
    assert common_pb2.JobState.Name(job.state) == "JOB_STATE_SUCCEEDED", (job.error.reason, job.error.message)
    return job


@pytest.fixture(scope="module")
def selftest_job(env):
    return env.jobs.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=8, step_seconds=0.6),
                                     metadata=auth(_token(env, "a"))).job


@pytest.fixture(scope="module")
def unlearned(env):
    """A softmax head trained on 300 synthetic records, then 5 of them forgotten with the certified noisy
    minimizer (the cheapest unlearning path of tests/unlearning): v2's parent is v1, through the record."""
    from services.unlearning.data import DATASET_CONTENT_TYPE, encode_dataset
    from services.unlearning.synthetic import blobs

    token = _token(env, "a")
    X, y = blobs(300, 6, 2, seed=3)
    ids = [f"rec-{i:03d}" for i in range(300)]
    ds = _upload(env, token, "train.safetensors", encode_dataset(X.float(), y, ids), DATASET_CONTENT_TYPE)
    stub = unlearning_pb2_grpc.UnlearningServiceStub(env.channel)
    name = f"console-head-{uuid.uuid4().hex[:6]}"
    trained = stub.StartTrainingJob(unlearning_pb2.StartTrainingJobRequest(
        dataset_artifact_id=ds, kind=unlearning_pb2.MODEL_KIND_SOFTMAX_L2, name=name, mu=0.05, epsilon=1.0,
        delta=1e-5, seed=1), metadata=auth(token)).job
    v1 = _succeeded(env, token, trained.id).result["model_version_id"]
    forgot = stub.StartUnlearningJob(unlearning_pb2.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name=name, version=1), forget_record_ids=ids[:5],
        method=unlearning_pb2.METHOD_CERTIFIED_NOISY_MINIMIZER, epsilon=1.0, delta=1e-5, seed=3, reason="DSR-7"),
        metadata=auth(token))
    _succeeded(env, token, forgot.job.id)
    return SimpleNamespace(name=name, v1=v1, record_id=forgot.record_id, job_id=forgot.job.id, dataset=ds)


@pytest.fixture(scope="module")
def campaign(env):
    """A campaign with 12 observations over two Observe calls (no job needed for its report and plot)."""
    stub = design_pb2_grpc.DesignServiceStub(env.channel)
    md = auth(_token(env, "a"))
    camp = stub.CreateCampaign(design_pb2.CreateCampaignRequest(
        name=f"console-camp-{uuid.uuid4().hex[:6]}", alphabet="ACDE", length=4, batch_size=4,
        direction=design_pb2.DIRECTION_MAXIMIZE), metadata=md).campaign
    seqs = ["ACDE", "CADE", "DDAC", "EEAA", "ACAC", "DECA", "CCDD", "EACD", "ADEC", "CEDA", "DAEC", "EDCA"]
    for chunk in (seqs[:6], seqs[6:]):
        stub.Observe(design_pb2.ObserveRequest(campaign_id=camp.id, observations=[
            design_pb2.Observation(sequence=s, value=float(sum("ACDE".index(c) * (i + 1) for i, c in enumerate(s))))
            for s in chunk]), metadata=md)
    return camp


@pytest.fixture(scope="module")
def flow_samples(env):
    """Guided samples of the built-in 2-D mixture's exact flow (no training), a few cheap iterations."""
    from praxon.design.v1 import flows_pb2, flows_pb2_grpc

    stub = flows_pb2_grpc.GuidedFlowServiceStub(env.channel)
    token = _token(env, "a")
    name = f"console-ring-{uuid.uuid4().hex[:6]}"
    trained = stub.StartFlowTrainingJob(flows_pb2.StartFlowTrainingJobRequest(
        name=name, builtin=flows_pb2.FLOW_DATASET_GMM_2D, method=flows_pb2.FLOW_TRAINING_METHOD_ANALYTIC),
        metadata=auth(token)).job
    _succeeded(env, token, trained.id)
    job = stub.StartGuidedFlowSamplingJob(flows_pb2.StartGuidedFlowSamplingJobRequest(
        flow=common_pb2.ModelRef(name=name), reward=[flows_pb2.RewardTerm(kind=flows_pb2.REWARD_KIND_DISTANCE,
                                                                          target=[4.0, 0.0])],
        control_cost=0.05, steps=10, iterations=4, num_samples=64, learning_rate=0.1,
        method=flows_pb2.GUIDANCE_METHOD_OC_FLOW, seed=1), metadata=auth(token)).job
    return _succeeded(env, token, job.id)


# ---------------------------------------------------------------------------------------------------- the tests
def test_sign_in_refuses_a_bad_token_and_shows_the_jobs(env, page):
    response = page.goto(f"{env.url}/jobs")
    assert page.url.startswith(f"{env.url}/signin") and response.status == 200  # redirected to sign in
    _shot(page, "01-signin")
    page.fill("input[name=token]", "not-a-token-" + uuid.uuid4().hex)
    with page.expect_navigation() as nav:
        page.click("button[type=submit]")
    assert nav.value.status == 401 and "refused" in page.locator("[role=alert]").inner_text()
    assert page.context.cookies() == [] or all(c["name"] != "praxon_console" for c in page.context.cookies())
    page.goto(f"{env.url}/jobs")
    assert "/signin" in page.url  # still not signed in

    _sign_in(page, env, _token(env, "a"))
    assert page.url == f"{env.url}/jobs" and page.locator("h1").inner_text() == "Jobs"
    cookie = next(c for c in page.context.cookies() if c["name"] == "praxon_console")
    assert cookie["httpOnly"] and _token(env, "a") not in cookie["value"]  # the token stays on the server
    _shot(page, "02-jobs-empty")


def test_a_jobs_progress_bar_moves_to_done(env, page, selftest_job):
    _sign_in(page, env, _token(env, "a"))
    page.goto(f"{env.url}/jobs/{selftest_job.id}")
    bar = f'progress.bar[data-job="{selftest_job.id}"]'
    if page.locator(".facts[data-live]").count():  # opened while the job runs: the bar must move on its own
        page.wait_for_function(f"() => {{ const b = document.querySelector('{bar}'); "
                               "return b.value > 0 && b.value < 1; }")
        partway = page.locator(bar).evaluate("b => b.value")
        _shot(page, "03-job-running")
        page.wait_for_function(f"() => document.querySelector('{bar}').value === 1")
        page.wait_for_selector(".facts[data-ended=SUCCEEDED]")
        assert 0 < partway < 1
    else:  # the worker finished it before the page opened: the page was rendered from the final state
        pytest.fail("the self-test job ended before its page opened; lengthen it")
    state = page.locator(f'.facts .state[data-job="{selftest_job.id}"]').inner_text()
    assert state == "SUCCEEDED"
    rows = page.locator("table.events tbody tr")
    assert rows.count() >= 9  # RUNNING, 8 steps, SUCCEEDED (as they streamed in)
    assert "SUCCEEDED" in rows.last.inner_text()
    assert not page.locator(".while-live").is_visible() and page.locator(".when-ended").is_visible()  # no cancel
    assert page.locator(f'.ended[data-job="{selftest_job.id}"]').inner_text().strip() not in ("", "-")
    _shot(page, "04-job-done")

    # after a reload, the page is rendered from the finished job: events, result, artifacts with a download link
    page.reload()
    assert page.locator("table.events tbody tr").count() == rows.count()
    link = page.locator("table.artifacts a.download").first
    assert link.count() == 1
    href = link.get_attribute("href")
    got = page.request.get(f"{env.url}{href}", max_redirects=0)
    assert got.status == 302 and "X-Amz-Signature" in got.headers["location"]  # a presigned URL
    assert page.request.get(f"{env.url}{href}").body().startswith(b"selftest ")

    page.goto(f"{env.url}/jobs?kind=platform.selftest&state=SUCCEEDED")
    assert page.locator(f'tr[data-job="{selftest_job.id}"]').count() == 1
    page.goto(f"{env.url}/jobs?kind=unlearning.train")
    assert page.locator(f'tr[data-job="{selftest_job.id}"]').count() == 0
    page.goto(f"{env.url}/jobs")
    _shot(page, "05-jobs")


def test_cancel_asks_for_confirmation_first(env, page):
    job = env.jobs.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=200, step_seconds=0.5),
                                    metadata=auth(_token(env, "a"))).job
    _sign_in(page, env, _token(env, "a"))
    page.goto(f"{env.url}/jobs/{job.id}")
    page.click("a.button.danger")
    assert page.url == f"{env.url}/jobs/{job.id}/cancel"
    assert env.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.id), metadata=auth(_token(env, "a"))).job \
        .cancel_requested is False  # opening the confirmation changes nothing
    _shot(page, "06-cancel-confirm")
    with page.expect_navigation():
        page.click("button.danger")
    page.wait_for_selector(".facts[data-ended=CANCELLED], .facts:not([data-live])")
    cancelled = harness.wait_job(env.jobs, _token(env, "a"), job.id, 120)
    assert common_pb2.JobState.Name(cancelled.state) == "JOB_STATE_CANCELLED"


def test_a_models_lineage_after_unlearning_shows_the_new_versions_parent(env, page, unlearned):
    _sign_in(page, env, _token(env, "a"))
    page.goto(f"{env.url}/models")
    assert page.locator(f'a[href="/models/{unlearned.name}"]').count() == 1
    _shot(page, "07-models")
    page.goto(f"{env.url}/models/{unlearned.name}")
    svg = page.locator("svg.lineage")
    assert svg.locator(f'[data-node="version-{unlearned.name}-1"]').count() == 1
    assert svg.locator(f'[data-node="version-{unlearned.name}-2"]').count() == 1
    assert svg.locator(f'[data-node="dataset-{unlearned.dataset}"]').count() == 1
    edge = svg.locator("g.edge.unlearn")
    assert edge.count() == 1 and edge.text_content().strip() == "unlearned: certified noisy minimizer"
    assert edge.locator("a").get_attribute("href") == f"/unlearning/{unlearned.record_id}"
    # the edge runs from v1's box to v2's box
    x1 = float(edge.locator("line").get_attribute("x1"))
    x2 = float(edge.locator("line").get_attribute("x2"))
    v1_x = float(svg.locator(f'[data-node="version-{unlearned.name}-1"] rect').get_attribute("x"))
    v2_x = float(svg.locator(f'[data-node="version-{unlearned.name}-2"] rect').get_attribute("x"))
    assert v1_x < x1 < x2 == v2_x
    parents = page.locator("tr#v2 td.parents")
    assert parents.inner_text().strip() == f"{unlearned.name} v1" and parents.get_attribute("data-ids") == unlearned.v1
    _shot(page, "08-model-lineage")

    page.click(f'g.edge.unlearn a[href="/unlearning/{unlearned.record_id}"]')
    page.wait_for_url(f"{env.url}/unlearning/{unlearned.record_id}")
    text = page.locator("table.facts").inner_text()
    assert "certified noisy minimizer" in text and f"{unlearned.name} v2" in text and "DSR-7" in text
    assert '"certified": true' in page.locator("pre.json").first.inner_text()
    _shot(page, "09-unlearning-record")
    page.goto(f"{env.url}/unlearning")
    assert page.locator(f'a[href="/unlearning/{unlearned.record_id}"]').count() == 1
    _shot(page, "10-unlearning-records")


def test_a_campaigns_plot_opens(env, page, campaign):
    _sign_in(page, env, _token(env, "a"))
    page.goto(f"{env.url}/campaigns")
    page.click(f'a[href="/campaigns/{campaign.id}"]')
    page.wait_for_url(f"{env.url}/campaigns/{campaign.id}")
    plot = page.locator("img.plot")
    plot.wait_for()
    page.wait_for_function("() => document.querySelector('img.plot').complete")
    assert plot.evaluate("img => img.naturalWidth") > 100  # a decoded PNG, not a broken image
    assert "12" in page.locator("table.facts").inner_text()
    rows = page.locator("table.report tbody tr")
    assert rows.count() >= 1 and rows.last.locator("td").nth(2).inner_text() == "12"
    _shot(page, "11-campaign")
    response = page.goto(f"{env.url}/crystals")  # no crystal set here (one costs minutes): the list, empty
    assert response.status == 200 and page.locator("td.empty").count() == 1
    _shot(page, "12-crystal-sets")


def test_flow_samples_show_their_plot_and_table(env, page, flow_samples):
    _sign_in(page, env, _token(env, "a"))
    page.goto(f"{env.url}/flows")
    page.click(f'a[href="/flows/{flow_samples.id}"]')
    page.wait_for_url(f"{env.url}/flows/{flow_samples.id}")
    png = next(a for a in flow_samples.artifacts if a.content_type == "image/png")
    img = page.locator(f'img[src="/artifacts/{png.id}/inline"]')
    img.wait_for()
    page.wait_for_function(f"() => document.querySelector('img[src=\"/artifacts/{png.id}/inline\"]').complete")
    assert img.evaluate("img => img.naturalWidth") > 100  # the job's own PNG, served through the console
    rows = page.locator("table.iterations tbody tr")
    assert rows.count() == len(flow_samples.result["per_iteration"]["reward"]) == 5  # before + 4 iterations
    _shot(page, "13-flow-samples")


def test_a_second_tenant_gets_404_for_the_first_tenants_pages(env, page, selftest_job, unlearned, campaign,
                                                              flow_samples):
    _sign_in(page, env, _token(env, "b"))
    page.goto(f"{env.url}/jobs")
    assert page.locator(f'tr[data-job="{selftest_job.id}"]').count() == 0
    assert page.locator("td.empty").count() == 1  # tenant b has no jobs at all
    job = env.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=selftest_job.id), metadata=auth(_token(env, "a"))).job
    for path in (f"/jobs/{selftest_job.id}", f"/jobs/{selftest_job.id}/cancel", f"/models/{unlearned.name}",
                 f"/unlearning/{unlearned.record_id}", f"/campaigns/{campaign.id}",
                 f"/campaigns/{campaign.id}/plot.png", f"/artifacts/{job.artifacts[0].id}",
                 f"/artifacts/{unlearned.dataset}", f"/flows/{flow_samples.id}",
                 f"/artifacts/{flow_samples.artifacts[0].id}/inline", f"/crystals/{selftest_job.id}",
                 "/jobs/not-a-job-id"):
        response = page.goto(f"{env.url}{path}")
        assert response.status == 404, (path, response.status)
    for path, gone in (("/models", unlearned.name), ("/campaigns", campaign.id), ("/unlearning", unlearned.record_id)):
        page.goto(f"{env.url}{path}")
        assert gone not in page.content(), path
    page.goto(f"{env.url}/models/{unlearned.name}")
    _shot(page, "14-other-tenant-404")


def test_a_revoked_token_ends_the_session(env, page):
    tenant = env.tenants["a"][0]
    with db.connect(env.settings) as conn:
        _, token = db.create_token(conn, tenant, "console-revoke")
    _sign_in(page, env, token)
    assert page.url == f"{env.url}/jobs"
    with db.connect(env.settings) as conn:
        assert db.revoke_tokens(conn, tenant, token_name="console-revoke") == 1
    page.goto(f"{env.url}/models")
    assert page.url.startswith(f"{env.url}/signin") and "reason=expired" in page.url
    assert "refused" in page.locator("[role=alert]").inner_text()
    _shot(page, "15-revoked")
    _sign_in(page, env, token)  # and it cannot sign in again
    assert "/signin" in page.url and "refused" in page.locator("[role=alert]").inner_text()
