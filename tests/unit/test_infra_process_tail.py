"""A failed start's message names why: the log's first errors before its last lines."""

from __future__ import annotations

from infra.process import tail


def test_tail_puts_the_first_errors_before_the_last_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(["[t] INFO starting"] + ["[t] ERROR Address already in use"]
                             + [f"[t] INFO shutting down {i}" for i in range(40)]))
    text = tail(log, lines=5)
    assert text.splitlines()[:2] == ["(first errors)", "[t] ERROR Address already in use"]
    assert text.endswith("[t] INFO shutting down 39")


def test_tail_without_errors_is_the_last_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(f"line {i}" for i in range(10)))
    assert tail(log, lines=3) == "line 7\nline 8\nline 9"
    assert tail(tmp_path / "missing.log").startswith("(no log at")
