"""DistributedDataParallel under torchrun, two CPU processes (gloo): the same weights as one process with the
same global batch, and exact resumption."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from maskplay.train import train
from tests.test_train import NO_DROPOUT, assert_same_weights, child_env, cli_command, make_data, small_config, weights

pytestmark = pytest.mark.slow


def torchrun(args: list[str], nproc: int = 2) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node N -m maskplay pretrain ...` (a free port is picked)."""
    assert args[1:3] == ["-m", "maskplay"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
               "-m", "maskplay", *args[3:]]
    result = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("data"))


def test_two_processes_give_the_weights_of_one(data, tmp_path):
    """Each process takes half of every global batch of 16, in 2 micro-batches of 4: the gradient is still
    that of the whole batch's mean token loss (dropout off, so the runs can agree)."""
    one = train(small_config(data, tmp_path / "one", *NO_DROPOUT, family="gpt"))
    two = torchrun(cli_command(data, tmp_path / "two", *NO_DROPOUT, "optim.grad_accum=2", family="gpt"))
    assert "2 process(es) x 2 micro-batch(es) of 4" in two.stdout
    assert two.stdout.count("reached optim.max_steps") == 1  # only rank 0 reports
    assert_same_weights(weights(one.run_dir), weights(tmp_path / "two"), exact=False)


def test_resume_under_ddp_is_exact(data, tmp_path):
    """BERT with dropout: every process's RNG streams are in the checkpoint (written by rank 0 alone)."""
    run_dir = tmp_path / "run"
    torchrun(cli_command(data, run_dir, "run.keep_last=5", family="bert"))
    expected = weights(run_dir)
    shutil.rmtree(run_dir / "ckpt-000008")
    shutil.rmtree(run_dir / "final")
    resumed = torchrun([sys.executable, "-m", "maskplay", "pretrain", "--out", str(run_dir), "--resume"])
    assert "resumed from" in resumed.stdout and "ckpt-000004" in resumed.stdout
    assert_same_weights(expected, weights(run_dir))


def test_sigterm_to_torchrun_checkpoints_and_stops_every_process(data, tmp_path):
    import signal

    from maskplay.train import checkpoint as ckpt
    from tests.test_train import wait_for_step

    run_dir = tmp_path / "run"
    args = cli_command(data, run_dir, "optim.max_steps=100000", "run.save_every=0", "run.eval_every=0")
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             "-m", "maskplay", *args[3:]], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for_step(run_dir, proc, 3, need_checkpoint=False, timeout=120)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert "stopped by SIGTERM" in out, out + err[-3000:]
    (step, path), = ckpt.list_checkpoints(run_dir)
    ckpt.verify_checkpoint(path)
    rng = ckpt.read_tensors(path / ckpt.RNG_FILE)
    assert {k.split("/")[0] for k in rng} == {"rank0", "rank1"}


def test_electra_trains_and_resumes_exactly_under_ddp(data, tmp_path):
    """Two towers, shared embeddings, the generator's samples drawn per process: replicas stay equal (the trainer
    checks at every save) and a resumed run ends with the same weights."""
    run_dir = tmp_path / "run"
    torchrun(cli_command(data, run_dir, "run.keep_last=5", family="electra"))
    expected = weights(run_dir)
    assert any(k.startswith("generator.") for k in expected)
    shutil.rmtree(run_dir / "ckpt-000008")
    shutil.rmtree(run_dir / "final")
    resumed = torchrun([sys.executable, "-m", "maskplay", "pretrain", "--out", str(run_dir), "--resume"])
    assert "resumed from" in resumed.stdout and "ckpt-000004" in resumed.stdout
    assert_same_weights(expected, weights(run_dir))


def test_xlnet_trains_and_resumes_exactly_under_ddp(data, tmp_path):
    """Two streams, a random order per sequence drawn per process, segment terms unused without segment ids
    (DDP told so): replicas stay equal and a resumed run ends with the same weights."""
    run_dir = tmp_path / "run"
    torchrun(cli_command(data, run_dir, "run.keep_last=5", family="xlnet"))
    expected = weights(run_dir)
    assert "query_start" in expected
    shutil.rmtree(run_dir / "ckpt-000008")
    shutil.rmtree(run_dir / "final")
    resumed = torchrun([sys.executable, "-m", "maskplay", "pretrain", "--out", str(run_dir), "--resume"])
    assert "resumed from" in resumed.stdout and "ckpt-000004" in resumed.stdout
    assert_same_weights(expected, weights(run_dir))
