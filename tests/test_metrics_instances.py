"""/metrics under gunicorn with two workers (``monark/gunicorn_conf.py``, prometheus-client's
multiprocess mode): scraped while turns run on both, whichever worker answers, the counts
add up to every worker's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, select, text

from monark.chat.models import Message
from tests.instances import HOST, Client, deployment, free_port
from tests.llm_script import Say

pytestmark = pytest.mark.instances  # starts app processes of its own

TOKEN = "two-workers-metrics-token"
TURNS = 6


def scrape(url: str, path: str = "/metrics") -> dict[str, float]:
    """Samples summed by name and the labels asked for later (outcome, kind)."""
    answer = httpx2.get(f"{url}{path}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert answer.status_code == 200, answer.text[:300]
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            key = s.name + "".join(f"|{s.labels[k]}" for k in ("outcome", "kind") if k in s.labels)
            out[key] = out.get(key, 0.0) + s.value
    return out


def test_two_workers_counts_add_up_whichever_answers(tmp_path):
    folder = tmp_path / "prometheus"
    folder.mkdir()
    bind = f"{HOST}:{free_port()}"  # the master's own bind, without the token
    settings = {
        "METRICS_TOKEN": TOKEN,
        "METRICS_BIND": bind,
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
    }
    with deployment(1, broker=False, conf=True, workers=2, **settings) as running:
        url = running[0].url
        assert httpx2.get(f"{url}/metrics", timeout=30).status_code == 401
        for i in range(TURNS):
            running.fake.script.add([Say(f"Answer number {i}.")])
        running.fake.chunk_delay = 0.02

        def turn(i: int) -> str:
            client = Client(url)  # a connection of its own: either worker may serve it
            try:
                return client.send(f"Question {i}").wait_done()
            finally:
                client.close()

        with ThreadPoolExecutor(TURNS) as pool:
            futures = [pool.submit(turn, i) for i in range(TURNS)]
            during = scrape(url)  # while they run
            for f in futures:
                assert "done" in f.result()
        assert during.get("monark_turns_total|done", 0) <= TURNS
        engine = create_engine(running.database_url)
        with engine.connect() as conn:
            stored = conn.execute(
                text(
                    "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),"
                    " coalesce(sum(cache_read_tokens), 0),"
                    " coalesce(sum(cache_creation_tokens), 0),"
                    " count(*) FILTER (WHERE role = 'assistant' AND cost IS NULL)"
                    " FROM chat_messages"
                )
            ).one()
            # Each reply's exact cost read through its column's type (on SQLite, an integer
            # of 1e-10 dollars), summed here.
            costs = conn.execute(select(Message.cost).where(Message.cost.is_not(None))).scalars()
            cost = sum(costs, Decimal(0))
        engine.dispose()
        for _ in range(8):  # several scrapes, whichever worker answers each
            samples = scrape(url)
            assert samples["monark_turns_total|done"] == TURNS
            assert samples["monark_turn_duration_seconds_count"] == TURNS
            assert samples["monark_tokens_total|input"] == stored[0] > 0
            assert samples["monark_tokens_total|output"] == stored[1] > 0
            assert samples.get("monark_tokens_total|cache_read", 0) == stored[2]
            assert samples.get("monark_tokens_total|cache_write", 0) == stored[3]
            # The default model is priced: the replies' exact costs, summed as floats.
            assert stored[4] == 0 and cost > 0
            assert samples["monark_cost_usd_total"] == pytest.approx(float(cost))
        # The separate bind (gunicorn's master) says the same, state included.
        served = scrape(f"http://{bind}", "/")
        assert served["monark_turns_total|done"] == TURNS
        assert served["monark_approvals_waiting"] == 0
        # Both workers counted (one file of counts per worker process).
        writers = {p.stem.rsplit("_", 1)[-1] for p in folder.glob("histogram_*.db")}
        assert len(writers) == 2, writers
        log = running[0].log_path.read_text()
        assert "Booting worker" in log and log.count("Booting worker") == 2
