"""A bad `shoal.Job` is refused up front, in one line naming the field: its values when the Job
is made (the launcher makes it before any worker starts), what its factories build when the
trainer builds them, and what its loss function returns at the first micro-batch, before any
step trains. Never an exception from inside shoal's own files."""

import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shoal
from shoal.cli import main
from shoal.config import RunConfig
from shoal.errors import UserError
from shoal.plan import DataOrder, data_seed, micro_batch_seed
from shoal.runtime.trainer import Trainer

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / "examples" / "digits.py")


def fields(**overrides) -> dict:
    """A valid job's fields (Linear(8, 3), SGD, 64 samples, b=4, B=16), some replaced."""
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.arange(64) % 3)
    base = dict(
        model=lambda: nn.Linear(8, 3),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        dataset=data,
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=4,
        global_batch_size=16,
    )
    return {**base, **overrides}


def refused(fn, *needles: str) -> str:
    """fn raises a UserError of one line that contains every needle; returns the message."""
    with pytest.raises(UserError) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(64))

    def __len__(self) -> int:  # a length does not make it readable by index
        return 64


@pytest.mark.parametrize(
    "name, value, needle",
    [
        ("model", nn.Linear(8, 3), "a Linear instance"),
        ("model", None, "callable"),
        ("lr_scheduler", "step", "got str"),
        ("collate_fn", 5, "got int"),
        ("seed", "abc", "got str"),
        ("seed", None, "got NoneType"),
        ("seed", 1.7, "got float"),
        ("seed", True, "got bool"),
        ("seed", 2**130, "2**127"),
        ("seed", -(2**127) - 1, "2**127"),
        ("shuffle", "no", "got str"),
        ("batch_options", "bad", "got str"),
        ("batch_policy", 3, "got int"),
        ("workload", 3, "got int"),
        ("micro_batch_size", True, "got True"),
        ("global_batch_size", True, "got True"),
        ("micro_batch_size", 4.0, "got 4.0"),
        ("dataset", Stream(), "IterableDataset"),
        ("dataset", iter(range(64)), "map-style"),
        ("clip_grad_norm", 0, "positive number"),
        ("clip_grad_norm", -1.0, "got -1.0"),
        ("clip_grad_norm", float("inf"), "got inf"),
        ("clip_grad_norm", float("nan"), "got nan"),
        ("clip_grad_norm", "1.0", "got '1.0'"),
        ("clip_grad_norm", True, "got True"),
        ("autocast", "half", "'float16', 'bfloat16' or None, got 'half'"),
        ("autocast", True, "got True"),
        ("loss_scale", "dyn", "'dynamic', a dict of GradScaler's settings"),
        ("loss_scale", 0, "above 0 and below 2**128"),
        ("loss_scale", float("nan"), "got nan"),
        ("loss_scale", 2.0**128, "below 2**128"),
        ("loss_scale", 10**400, "an integer of 1329 bits"),
        ("loss_scale", True, "got True"),
        ("loss_scale", {"init": 8.0}, "unknown setting(s) init (known: init_scale, growth_factor"),
        ("loss_scale", {"growth_factor": 1}, "['growth_factor'] must be a number above 1"),
        (
            "loss_scale",
            {"backoff_factor": 1.0},
            "['backoff_factor'] must be a number above 0 and below 1",
        ),
        ("loss_scale", {"growth_interval": 0}, "['growth_interval'] must be a positive integer"),
        ("loss_scale", {"growth_interval": 2.0}, "got 2.0"),
        ("loss_scale", {"init_scale": "big"}, "['init_scale'] must be a number"),
    ],
)
def test_a_bad_field_value_is_refused_when_the_job_is_made(name, value, needle):
    refused(lambda: shoal.Job(**fields(**{name: value})), f"Job.{name}", needle)


def test_a_dataset_smaller_than_a_micro_batch_names_the_field():
    small = torch.utils.data.TensorDataset(torch.randn(3, 8), torch.zeros(3, dtype=torch.long))
    refused(lambda: shoal.Job(**fields(dataset=small)), "Job.dataset", "fewer than one micro")


@pytest.mark.parametrize("seed", [0, -1, -(2**127), 2**127 - 1, 2**64])
def test_every_seed_in_range_works_negative_ones_included(seed):
    job = shoal.Job(**fields(seed=seed))
    # every use of the seed in the data order and the generators' seeds
    order = DataOrder(len(job.dataset), job.micro_batch_size, job.seed, job.shuffle)
    assert len(order.sample_ids(0, 3)) == 4
    assert micro_batch_seed(job.seed, -1, 0) != data_seed(job.seed, -1, 0)


@pytest.mark.parametrize("seed", [2**127, -(2**127) - 1])
def test_the_seed_range_is_the_one_the_seed_mixer_takes(seed):
    with pytest.raises(OverflowError):  # why the bounds are where they are
        micro_batch_seed(seed, 0, 0)
    refused(lambda: shoal.Job(**fields(seed=seed)), "Job.seed")
    refused(lambda: RunConfig(job="j.py", steps=1, out="o", seed=seed), "--seed")


def test_an_out_of_range_seed_flag_is_one_line_before_any_worker_starts(capsys, tmp_path):
    out = tmp_path / "run"
    argv = ["run", DIGITS, "--workers", "v100", "--steps", "2", "--out", str(out)]
    code = main([*argv, "--seed=" + "9" * 41])
    err = capsys.readouterr().err
    assert code == 2 and "--seed" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # refused before the run directory, let alone a worker


@pytest.mark.parametrize("seed", [-5, -(2**127), 2**127 - 1])
def test_a_seed_flag_in_range_is_taken_negative_ones_included(seed):
    assert RunConfig(job="j.py", steps=1, out="o", seed=seed).seed == seed


def frozen() -> nn.Module:
    model = nn.Linear(8, 3)
    model.requires_grad_(False)
    return model


def synced() -> nn.Module:
    model = nn.Sequential(nn.Linear(8, 3), nn.BatchNorm1d(3))
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


@pytest.mark.parametrize(
    "overrides, needles",
    [
        (dict(model=lambda: None), ("Job.model must return a torch.nn.Module", "NoneType")),
        (dict(model=lambda: lambda x: x), ("Job.model must return a torch.nn.Module", "function")),
        (dict(model=frozen), ("Job.model", "no trainable parameters")),
        (dict(model=lambda: nn.Linear(8, 3).double()), ("Job.model", "float32", "float64")),
        (dict(model=lambda: nn.LazyLinear(3)), ("Job.model", "uninitialized", "LazyLinear")),
        (dict(model=synced), ("Job.model", "SyncBatchNorm", "use BatchNorm")),
        (dict(optimizer=lambda p: None), ("Job.optimizer", "torch.optim.Optimizer", "NoneType")),
        (dict(optimizer=torch.optim.LBFGS), ("Job.optimizer", "LBFGS", "closure")),
        (dict(optimizer=torch.optim.SparseAdam), ("Job.optimizer", "SparseAdam", "densely")),
        (dict(lr_scheduler=lambda opt: None), ("Job.lr_scheduler", "step()", "NoneType")),
        (
            dict(lr_scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau),
            ("Job.lr_scheduler", "ReduceLROnPlateau", "no metric"),
        ),
    ],
)
def test_what_a_factory_builds_is_checked_where_it_is_built(overrides, needles):
    job = shoal.Job(**fields(**overrides))
    refused(lambda: Trainer(job), *needles)


def test_a_float64_model_is_fine_without_the_exact_sum():
    job = shoal.Job(**fields(model=lambda: nn.Linear(8, 3).double()))
    assert Trainer(job, consistency="fast").model.weight.dtype == torch.float64


def test_a_model_of_mixed_dtypes_is_refused_without_the_exact_sum_too():
    def mixed() -> nn.Module:
        model = nn.Linear(8, 3)
        model.bias = nn.Parameter(torch.zeros(3, dtype=torch.float64))
        return model

    job = shoal.Job(**fields(model=mixed))
    refused(lambda: Trainer(job, consistency="fast"), "Job.model", "float32, float64")


def test_an_optimizer_factory_may_read_its_parameters_twice():
    """Param groups split by p.ndim (as nanoGPT's) read the parameters twice: a generator's
    second pass was empty, and the biases were never stepped."""

    def grouped(params):
        return torch.optim.AdamW(
            [
                {"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
                {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
            ]
        )

    trainer = Trainer(shoal.Job(**fields(optimizer=grouped)))
    assert [len(g["params"]) for g in trainer.optimizer.param_groups] == [1, 1]


@pytest.mark.parametrize("consistency", ["exact", "fast"])
def test_a_parameter_of_no_elements_trains(consistency):
    def with_empty() -> nn.Module:
        model = nn.Linear(8, 3)
        model.unused = nn.Parameter(torch.zeros(0))  # e.g. a layer configured to width 0
        return model

    trainer = Trainer(shoal.Job(**fields(model=with_empty)), consistency=consistency)
    for _ in range(3):  # the first step probes, the second predicts its bounds from the first
        trainer.train_step()
    assert trainer.step == 3 and trainer.model.unused.numel() == 0


def test_a_scheduler_stepped_without_a_metric_is_taken():
    step_lr = lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2)  # noqa: E731
    trainer = Trainer(shoal.Job(**fields(lr_scheduler=step_lr)))
    trainer.train_step()
    assert trainer.scheduler.last_epoch == 1


def logits(model, batch):
    return model(batch[0])


@pytest.mark.parametrize(
    "loss_fn, got",
    [
        (lambda model, batch: 0.5, "got float"),
        (lambda model, batch: (F.cross_entropy(logits(model, batch), batch[1]), 1), "got tuple"),
        (lambda m, b: F.cross_entropy(logits(m, b), b[1], reduction="none"), "shape (4,)"),
        (lambda model, batch: torch.tensor(0.5), "does not require grad"),
    ],
)
def test_a_loss_that_is_not_a_scalar_tensor_is_refused_before_any_update(loss_fn, got):
    trainer = Trainer(shoal.Job(**fields(loss_fn=loss_fn)))
    before = trainer.model.weight.detach().clone()
    refused(trainer.train_step, "Job.loss_fn must return a scalar (one-element) tensor", got)
    assert trainer.step == 0 and torch.equal(trainer.model.weight, before)


def test_a_one_element_loss_of_any_shape_trains():
    loss_fn = lambda m, b: F.cross_entropy(logits(m, b), b[1]).reshape(1, 1)  # noqa: E731
    trainer = Trainer(shoal.Job(**fields(loss_fn=loss_fn)))
    assert trainer.train_step().step == 0 and trainer.step == 1
