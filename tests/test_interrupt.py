"""Ctrl-C / SIGTERM: a real `sentiment train` subprocess stops between steps, says how to resume, and resumes."""

import json
import os
import signal
import subprocess
import time

import pytest

from sentiment_cli.training.interrupts import stop_on_signals

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV

pytestmark = pytest.mark.slow   # signals real `sentiment train` processes


def _small_toml(tmp_path):
    cfg = tmp_path / "small.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text().replace("vocab_size = 50000", "vocab_size = 5000"))
    return cfg


def _wait_for(path, proc, timeout=240):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never saved an epoch"
        time.sleep(0.05)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_training_with_a_resume_hint_and_the_run_resumes(tmp_path, sig, code):
    out = tmp_path / "run"
    # 30 epochs: the run is certainly still going when the signal arrives, wherever the scheduler puts us
    proc = subprocess.Popen([PYTHON, "-m", "sentiment_cli", "train", "--config", _small_toml(tmp_path),
                             "--data", SMALL_DATA, "--output", out, "--epochs", "30", "--batch-size", "32",
                             "--device", "cpu"], cwd=ROOT, env=SUBPROCESS_ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(out / "trainer_state" / "state.json", proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: interrupted by {signal.Signals(sig).name} during epoch ")
    assert f"is saved; resume with: sentiment train --resume {out}" in last
    assert "Traceback" not in stderr
    saved = json.loads((out / "trainer_state" / "state.json").read_text())
    assert saved["epoch"] >= 1 and not list((out / "trainer_state").glob(".*.tmp"))
    assert len(json.loads((out / "metrics.json").read_text())["history"]) == saved["epoch"]
    if sig == signal.SIGINT:
        return   # resuming once is enough
    # resume to the end (one more epoch than were saved, to keep the test short)
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "train", "--resume", out, "--epochs", str(saved["epoch"] + 1),
                        "--json"], cwd=ROOT, env=SUBPROCESS_ENV, text=True, capture_output=True, timeout=240)
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout)
    assert [h["epoch"] for h in metrics["history"]] == list(range(1, saved["epoch"] + 2))
    assert metrics["resumed"][0]["after_epoch"] == saved["epoch"]


def test_handlers_set_a_flag_and_are_restored():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with stop_on_signals() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)   # would kill the test run without the handler
        time.sleep(0.01)
        assert stop.requested and stop.exit_code == 143 and stop.reason == "SIGTERM"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_second_ctrl_c_stops_at_once():
    with pytest.raises(KeyboardInterrupt):
        with stop_on_signals() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            assert stop.requested and stop.exit_code == 130
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
