"""Metrics and log lines per review; `vramgate check` and `/validate` agree on the examples."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from webhook.cli.main import main
from webhook.serve.logs import JsonFormatter

from .conftest import use
from .helpers import EXAMPLES, Service, cluster, example, pod_of, review


def test_reviews_are_counted_and_timed(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    svc.validate(example("seed-deployment.yaml"))
    use(svc, snapshot=cluster())
    svc.ask("mutate", review(pod_of(example("llama3-8b-deployment.yaml"))))
    text = svc.client.get("/metrics").text
    assert ('vramgate_admission_requests_total{kind="Deployment",operation="CREATE",reason="VRAMTooSmall",'
            'verdict="denied"}') in text
    assert 'vramgate_admission_requests_total{kind="Pod",operation="CREATE",reason="fits",verdict="patched"}' in text
    assert 'vramgate_admission_duration_seconds_count{webhook="validate"}' in text
    assert 'vramgate_admission_duration_seconds_count{webhook="mutate"}' in text


def test_one_json_log_line_per_review_without_values(svc: Service, caplog: pytest.LogCaptureFixture) -> None:
    pod = pod_of(example("llama3-8b-deployment.yaml"))
    pod["spec"]["containers"][0]["env"].append({"name": "HF_TOKEN", "value": "hf_secret_token_value"})
    body = review(pod)
    with caplog.at_level(logging.INFO, logger="vramgate.admission"):
        svc.ask("mutate", body)
    records = [r for r in caplog.records if r.name == "vramgate.admission" and r.getMessage() == "review"
               and r.fields["uid"] == body["request"]["uid"]]  # type: ignore[attr-defined]
    assert len(records) == 1
    line = JsonFormatter().format(records[0])
    assert "\n" not in line
    fields = json.loads(line)
    assert fields["uid"] == body["request"]["uid"]
    assert fields["object"] == "ml/llama3-8b-"
    assert (fields["kind"], fields["operation"], fields["verdict"], fields["reason"]) == ("Pod", "CREATE", "patched",
                                                                                         "fits")
    assert fields["webhook"] == "mutate" and fields["duration_ms"] > 0 and fields["patch_ops"] > 0
    assert "hf_secret_token_value" not in line and "llama-3-8b-instruct" not in line


CASES = [
    ("llama3-8b-deployment.yaml", "cluster.yaml"),
    ("llama3-8b-deployment.yaml", "cluster-small.yaml"),
    ("seed-deployment.yaml", "cluster.yaml"),
    ("seed-deployment.yaml", "cluster-small.yaml"),
]


@pytest.mark.parametrize(("manifest", "nodes"), CASES)
def test_check_agrees_with_validate(svc: Service, capsys: pytest.CaptureFixture[str], manifest: str,
                                    nodes: str) -> None:
    code = main(["check", "-f", str(EXAMPLES / manifest), "--nodes", str(EXAMPLES / nodes)])
    out = capsys.readouterr().out.splitlines()
    use(svc, snapshot=cluster(nodes))
    resp = svc.validate(example(manifest))
    verdict_line = out[0]
    assert verdict_line.startswith("ADMIT" if resp["allowed"] else "REJECT")
    assert code == (0 if resp["allowed"] else 1)
    if not resp["allowed"]:
        message = resp["status"]["message"]
        name, _, rest = message.partition(": ")
        # The CLI prints the workload's name once, then the message admission gives.
        assert verdict_line in (f"REJECT  {message}", f"REJECT  {name}: {message}")
        assert rest in verdict_line
    cli_warnings = [line.removeprefix("  warning: ") for line in out[1:] if line.startswith("  warning: ")]
    from webhook.serve.admission import fit_warnings

    assert fit_warnings(cli_warnings) == resp.get("warnings", [])


def test_examples_exist() -> None:
    assert all((EXAMPLES / m).is_file() and (EXAMPLES / n).is_file() for m, n in CASES)
    assert Path(EXAMPLES / "cluster.yaml").read_text().count("kind: Node") >= 8
