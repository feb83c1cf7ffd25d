"""The sandbox's audit policy: every request, or only the named users' (what `bench operator` counts)."""

from specpilot_harness.controlplane import audit


def test_without_users_every_request_is_logged_at_metadata_level() -> None:
    assert audit.policy()["rules"] == [{"level": "Metadata"}]


def test_with_users_only_theirs_are_logged_and_the_rest_not_at_all() -> None:
    rules = audit.policy(("system:serviceaccount:kube-system:op",))["rules"]
    assert rules == [{"level": "Metadata", "users": ["system:serviceaccount:kube-system:op"]}, {"level": "None"}]
