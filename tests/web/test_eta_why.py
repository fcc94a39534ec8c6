"""An /api/v1/eta answer with no job says why (daemon/web/eta_view.py). Found on `make run`: `?job=` with a job that
had started, or an id mistyped, read `{"made_at": ..., "age_s": ..., "jobs": []}`, the same as a tenant with nothing
queued, with nothing a user could act on."""

from daemon.web.eta_view import eta_for


def _view() -> dict:
    return {"made_at": 1000.0, "jobs": [{"job_id": "11", "tenant": "a", "gpus": 1, "position": 0, "p50_s": 60.0,
                                         "p90_s": 60.0, "basis": "run-length history"}]}


def test_an_eta_answer_with_no_job_says_why():
    assert "why" not in eta_for(_view(), 1001.0, "a", "11")
    assert eta_for(_view(), 1001.0, "a", "99")["why"] == ("no pending job '99' of a: estimates are made for pending "
                                                          "jobs only (one that started or ended has none)")
    # another tenant's job reads as no job of the asker's tenant: whether it exists is not said
    assert eta_for(_view(), 1001.0, "b", "11")["why"].startswith("no pending job '11' of b:")
    assert eta_for(_view(), 1001.0, None, "99")["why"].startswith("no pending job '99': ")
    assert eta_for(_view(), 1001.0, "b")["why"] == "no pending jobs of b"
    assert eta_for(None, 1001.0)["why"].startswith("no estimates yet")
