"""pytest plugin (`-p noskip`): a skipped test fails the run.

A conformance run must not pass by skipping: a test that pymemcache's suite or
ours skips (a missing optional module, a server feature probe) would otherwise
leave a green run that checked less than it claims.  Loaded by
scripts/conformance.sh for every pytest run.
"""

import pytest

_skipped = []


def pytest_runtest_logreport(report):
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_collectreport(report):
    if report.skipped:
        _skipped.append(report.nodeid or "<collection>")


def pytest_sessionfinish(session, exitstatus):
    if _skipped and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _skipped:
        terminalreporter.write_line(
            "noskip: %d skipped test(s) count as failures: %s"
            % (len(_skipped), ", ".join(_skipped[:10])),
            red=True,
        )
