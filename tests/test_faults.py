"""Faults of a training run (docs/reference/errors.md): a process of a torchrun run killed or hung, a checkpoint write that
fails half-way (the disk full), and two runs writing the same --out."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maskplay.runtime.files import OutputLock
from maskplay.tasks.train import checkpoint_files as ckpt
from maskplay.tasks.train import train
from maskplay.tasks.train.config import TrainConfig
from maskplay.tasks.train.distributed import Dist, describe_peer_failure, peer_failure
from tests.tasks.train.test_train import (
    assert_same_weights,
    child_env,
    cli_command,
    make_data,
    small_config,
    train_losses,
    wait_for_step,
    weights,
)
from tests.test_reliability import assert_one_line_error, run_cli

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
# the torchrun runs below: BERT (dropout and the masking draws: every RNG stream matters), 40 steps, a checkpoint
# every 5, so that a kill lands between two checkpoints with steps to redo
LONG = ["optim.max_steps=40", "optim.warmup_steps=5", "run.save_every=5", "run.eval_every=20"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("data"))


def start_torchrun(args: list[str], *extra: str) -> subprocess.Popen:
    """`torchrun --standalone` (a free port) of `maskplay pretrain ...`; extra: torchrun's own options."""
    assert args[1:3] == ["-m", "maskplay"]
    return subprocess.Popen([*TORCHRUN, *extra, "-m", "maskplay", *args[3:]], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ranks(agent: subprocess.Popen, n: int = 2, timeout: float = 60) -> dict[int, int]:
    """rank -> pid of the worker processes torchrun's agent started (read from their environment)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = {}
        children = Path(f"/proc/{agent.pid}/task/{agent.pid}/children")
        for pid in map(int, children.read_text().split() if children.exists() else []):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            rank = [item[5:] for item in environ if item.startswith(b"RANK=")]
            if rank:
                found[int(rank[0])] = pid
        if len(found) == n:
            return found
        time.sleep(0.05)
    raise AssertionError(f"torchrun did not start {n} workers in {timeout} s")


def wait_exit(pid: int, timeout: float) -> float:
    """Seconds until process `pid` (a torchrun worker, not our child) has ended."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return time.monotonic() - start
        if state in ("Z", "X"):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs after {timeout} s")


# ---- a process of a torchrun run killed or hung ------------------------------------------------------------------

@pytest.mark.heavy
@pytest.mark.slow
def test_sigkill_of_one_rank_stops_the_other_and_resume_is_exact(data, tmp_path):
    """SIGKILL rank 1 between two checkpoints: rank 0's next collective fails at once, it says so in one line
    naming the checkpoint, and `--resume` under torchrun ends bitwise where an uninterrupted 2-process run ends
    (same weights, same logged losses)."""
    ref = start_torchrun(cli_command(data, tmp_path / "ref", *LONG, family="bert"))
    victim_dir = tmp_path / "victim"
    victim = start_torchrun(cli_command(data, victim_dir, *LONG, family="bert"))
    workers = ranks(victim)
    kill_at = random.Random().randint(6, 30)
    seen = wait_for_step(victim_dir, victim, kill_at, need_checkpoint=True, timeout=120)
    os.kill(workers[1], signal.SIGKILL)
    killed = time.monotonic()
    out, err = victim.communicate(timeout=120)
    waited = time.monotonic() - killed
    context = f"killed at step {seen} (target {kill_at}), torchrun ended {waited:.1f} s later"
    assert not (victim_dir / "final").exists(), "the run finished before it was killed"
    assert waited < 60, context  # no hang: the agent's own grace period is 30 s
    errors = [line for line in err.splitlines() if line.startswith("maskplay pretrain: error:")]
    assert len(errors) == 1, context + err[-3000:]
    assert "process 0 of 2 lost contact with another process during step" in errors[0], errors
    assert "the newest checkpoint is" in errors[0] and "resume with --resume" in errors[0]
    # rank 0 ended by itself with the command's error code (not killed by the agent's SIGTERM), no traceback of ours
    assert "exitcode  : 2 " in err, context + err[-3000:]
    ours = [line for line in err.splitlines() if line.startswith("  File") and ("src/maskplay/" in line
                                                                              or "site-packages/maskplay/" in line)]
    assert not ours, err[-3000:]  # torchrun's own traceback names its files; none of the package's may appear
    assert "ERROR: process 0 of 2 lost contact" in (victim_dir / "train.log").read_text()

    resumed = subprocess.run([*TORCHRUN, "-m", "maskplay", "pretrain", "--out", str(victim_dir), "--resume"],
                             env=child_env(), capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, context + resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    ref_out, ref_err = ref.communicate(timeout=240)
    assert ref.returncode == 0, ref_out[-3000:] + ref_err[-3000:]
    assert_same_weights(weights(tmp_path / "ref"), weights(victim_dir))  # bitwise
    assert train_losses(tmp_path / "ref") == train_losses(victim_dir), context


@pytest.mark.heavy
@pytest.mark.slow
def test_a_hung_rank_is_noticed_after_run_dist_timeout_s(data, tmp_path):
    """SIGSTOP rank 1 (alive, its connections open, never answering): rank 0 waits run.dist_timeout_s, not
    torch's 30 minutes, then stops with the one-line error."""
    run_dir = tmp_path / "run"
    proc = start_torchrun(cli_command(data, run_dir, "optim.max_steps=100000", "run.save_every=3",
                                      "run.eval_every=0", "run.dist_timeout_s=4"), "--monitor-interval", "30")
    workers = ranks(proc)
    wait_for_step(run_dir, proc, 4, need_checkpoint=True, timeout=120)
    os.kill(workers[1], signal.SIGSTOP)
    try:
        waited = wait_exit(workers[0], timeout=60)
    finally:
        os.kill(workers[1], signal.SIGCONT)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert 3 < waited < 40, f"rank 0 stopped {waited:.1f} s after rank 1 hung (run.dist_timeout_s=4)"
    errors = [line for line in err.splitlines() if line.startswith("maskplay pretrain: error: process 0")]
    assert errors and "run.dist_timeout_s=4 s" in errors[0] and "Timed out" in errors[0], err[-3000:]
    (_, newest), *_ = reversed(ckpt.list_checkpoints(run_dir))
    ckpt.verify_checkpoint(newest)


def test_peer_failures_are_told_from_other_errors():
    two, one = Dist(rank=0, world_size=2), Dist()
    gloo = RuntimeError("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                        "[127.0.0.1]:4518: Connection reset by peer. This is typically caused by a remote worker "
                        "hanging or bugs in the application. GLHF!")
    assert peer_failure(two, gloo) and not peer_failure(one, gloo)
    assert not peer_failure(two, RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not peer_failure(two, RuntimeError("DataLoader timed out after 5 seconds"))
    assert describe_peer_failure(gloo) == "Read error [127.0.0.1]:4518: Connection reset by peer"
    timeout = RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
                           "4000ms for recv operation to complete")
    assert describe_peer_failure(timeout) == "Timed out waiting 4000ms for recv operation to complete"


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf"])
def test_dist_timeout_must_be_a_positive_number(bad):
    from maskplay.config import apply_overrides

    with pytest.raises(ValueError, match="run.dist_timeout_s must be a positive number"):
        apply_overrides(TrainConfig(), [f"run.dist_timeout_s={bad}"])


# ---- a checkpoint write that fails half-way ------------------------------------------------------------------

def test_a_checkpoint_write_that_fails_half_way_keeps_the_previous_one(data, tmp_path, monkeypatch):
    """The disk fills while ckpt-000008's weights are written: a real write error from the OS, injected with
    RLIMIT_FSIZE (the write of any file past `limit` bytes fails with EFBIG, as ENOSPC would; CPython ignores
    SIGXFSZ), in safetensors' own writer. The run stops with one error naming the intact previous checkpoint,
    leaves no partial directory, and a resume ends where an uninterrupted run ends."""
    config = ["optim.max_steps=12"]
    expected = weights(train(small_config(data, tmp_path / "ref", *config, family="bert")).run_dir)
    real_save = ckpt.save_file
    limit = 30_000  # bytes: less than the tiny model's weights (about 94 kB)
    calls = []

    def disk_fills_at_step_8(tensors, filename, metadata=None):
        calls.append(filename)
        if "ckpt-000008" not in filename:
            return real_save(tensors, filename, metadata=metadata)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            return real_save(tensors, filename, metadata=metadata)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    monkeypatch.setattr(ckpt, "save_file", disk_fills_at_step_8)
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError) as info:
        train(small_config(data, run_dir, *config, family="bert"))
    message = str(info.value)
    assert "cannot write checkpoint" in message and "ckpt-000008" in message and "File too large (os error 27)" in message
    assert f"the previous checkpoint {run_dir / 'ckpt-000004'} is intact" in message and "--resume" in message
    assert "\n" not in message
    assert [p.name for _, p in ckpt.list_checkpoints(run_dir)] == ["ckpt-000004"]
    assert not list(run_dir.glob(".tmp-*")) and not (run_dir / "final").exists()
    ckpt.verify_checkpoint(run_dir / "ckpt-000004")
    assert f"ERROR: {message}" in (run_dir / "train.log").read_text()

    monkeypatch.setattr(ckpt, "save_file", real_save)  # space freed
    resumed = train(small_config(data, run_dir, *config, family="bert"), resume=True)
    assert resumed.status == "finished"
    assert_same_weights(expected, weights(run_dir))


def test_a_final_export_that_fails_is_one_line_and_resume_exports(data, tmp_path, monkeypatch):
    from maskplay.nn.modeling import ModelBase

    run_dir = tmp_path / "run"

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ModelBase, "save_pretrained", disk_full)
    with pytest.raises(ValueError, match=r"cannot write the final model .*final: No space left on device; the "
                                         r"run's last checkpoint holds it"):
        train(small_config(data, run_dir))
    assert not (run_dir / "final").exists() and not list(run_dir.glob(".tmp-*"))
    monkeypatch.undo()
    result = train(small_config(data, run_dir), resume=True)
    assert result.final_dir == run_dir / "final" and (run_dir / "final" / "model.safetensors").is_file()


# ---- two runs writing the same --out ---------------------------------------------------------------------------

@pytest.mark.slow
def test_a_second_run_on_the_same_out_is_refused_while_the_first_trains(data, tmp_path, capsys):
    run_dir = tmp_path / "run"
    first = subprocess.Popen(cli_command(data, run_dir, "optim.max_steps=100000", "run.save_every=2",
                                         "run.eval_every=0"),
                             env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_step(run_dir, first, 3, need_checkpoint=True, timeout=120)
    # a resume of the same run (here in this process): without the lock both would write the same checkpoints; a
    # fresh start is refused the same way (test_a_second_run_in_process_is_refused_and_leaves_nothing)
    code, _, err = run_cli(["pretrain", "--out", str(run_dir), "--resume"], capsys)
    assert_one_line_error(code, err, "pretrain", f"run.out_dir (--out) {run_dir} is being written by another process")
    assert first.poll() is None  # the first run goes on, untouched
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and "stopped by SIGTERM" in out, out + err
    _, newest = ckpt.list_checkpoints(run_dir)[-1]
    ckpt.verify_checkpoint(newest)
    with OutputLock(run_dir, "run.out_dir (--out)"):  # released at the end of the run
        pass


def test_a_second_run_in_process_is_refused_and_leaves_nothing(data, tmp_path):
    """The lock is taken before anything is written: the refused run creates no run directory."""
    run_dir = tmp_path / "new-run"
    with OutputLock(run_dir, "run.out_dir (--out)"), pytest.raises(ValueError, match="being written by another"):
        train(small_config(data, run_dir))
    assert not run_dir.exists()


def test_score_out_is_refused_while_another_process_writes_it(tmp_path, capsys):
    """`score --out` takes files.OutputLock: here another process really holds it (tests/test_reliability.py
    holds it in this process for score, embed and eval)."""
    out = tmp_path / "scores.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from filelock import FileLock\n"
                               f"with FileLock({str(tmp_path / '.scores.jsonl.lock')!r}):\n"
                               " print('held', flush=True); sys.stdin.read()"],
                              env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    argv = ["score", "tta-mini-wiki", "a cat sat", "--out", str(out), "--format", "jsonl"]
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = run_cli(argv, capsys)
        assert_one_line_error(code, err, "score", f"--out {out} is being written by another process")
        assert not out.exists()
    finally:
        holder.communicate("", timeout=30)
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert out.read_text().count("\n") == 1
