"""On a failure, the report shows the end of the cluster's log (scripts/replicas.sh, the replicas'
access lines and nginx's errors) and nginx's access log (which replica answered each request)."""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cluster = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    if report.failed and cluster is not None:
        report.sections.append(("replicas.sh log (end)", cluster.log()[-6000:]))
        access = cluster.prefix / "access.log"
        if access.exists():
            report.sections.append(("nginx access.log (end)", access.read_text(errors="replace")[-4000:]))
