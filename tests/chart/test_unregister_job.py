"""The pre-delete hook (webhook/jobs/unregister_job.py) against an in-memory API; the real-node suite runs it."""

from __future__ import annotations

from typing import Any

from webhook.jobs.unregister_job import _Admission, main


class ApiException(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


class FakeAdmission(_Admission):
    """Only the two calls the Job makes; ``fail`` lists statuses the next deletes raise."""

    def __init__(self, present: set[tuple[str, str]], fail: list[int] | None = None) -> None:
        self.present = set(present)
        self.fail = list(fail or [])
        self.calls: list[tuple[str, str]] = []

    def delete(self, kind: str, name: str) -> bool:
        self.calls.append((kind, name))
        if self.fail:
            raise ApiException(self.fail.pop(0))
        if (kind, name) not in self.present:
            return False
        self.present.discard((kind, name))
        return True

    def exists(self, kind: str, name: str) -> bool:
        return (kind, name) in self.present


ARGS = ["--mutating", "vg-vramgate", "--validating", "vg-vramgate", "--timeout", "3"]


def test_deletes_both_configurations() -> None:
    api = FakeAdmission({("mutating", "vg-vramgate"), ("validating", "vg-vramgate"), ("validating", "other")})
    assert main(ARGS, api=api) == 0
    assert api.present == {("validating", "other")}
    assert api.calls == [("mutating", "vg-vramgate"), ("validating", "vg-vramgate")]


def test_already_gone_is_success(capsys: Any) -> None:
    api = FakeAdmission(set())
    assert main(ARGS, api=api) == 0
    assert capsys.readouterr().out.count("already gone") == 2


def test_a_transient_api_error_is_retried() -> None:
    api = FakeAdmission({("mutating", "vg-vramgate"), ("validating", "vg-vramgate")}, fail=[503])
    assert main(ARGS, api=api) == 0
    assert api.present == set()


def test_a_lasting_error_fails_the_job_after_the_timeout(capsys: Any) -> None:
    api = FakeAdmission({("mutating", "vg-vramgate")}, fail=[403] * 100)
    assert main([*ARGS[:4], "--timeout", "1.5"], api=api) == 1
    assert "cannot delete mutating vg-vramgate" in capsys.readouterr().err
