"""`python -m litforge.plan`: which card to rent, how long, what it costs on demand and
on spot, and the checkpoint interval for spot."""

from __future__ import annotations

import json
import math

import pytest

from litforge.commands import budget, plan
from litforge.planning.hardware import CARDS, Card, find_card
from litforge.planning.plan import economics, search
from litforge.training import train
from tests.helpers import ROOT, TINY_GPT

PRICES = ROOT / "conf" / "prices.example.yaml"


def run_plan(capsys, *args: str) -> dict:
    plan.main([*TINY_GPT, "trainer.max_steps=1000", *args, "--json"])
    return json.loads(capsys.readouterr().out)


def test_every_card_and_count_with_time_and_cost(capsys, tmp_path, make_cfg):
    png = tmp_path / "plan.png"
    found = run_plan(capsys, "--cards", "H100,T4", "--prices", str(PRICES), "--png", str(png))
    assert png.stat().st_size > 1000
    options = found["options"]
    assert [(o["card"], o["count"]) for o in options] == [
        (c, n) for c in ("H100", "T4") for n in (1, 2, 4, 8)
    ]
    assert found["effective_batch"] == 8 and found["max_steps"] == 1000
    h100, t4 = options[0], options[4]
    assert h100["fits"] and h100["setting"]["precision"] == "bf16-mixed"
    assert t4["setting"]["precision"] == "16-mixed"  # a T4 has no bfloat16
    assert h100["overrides"] == (
        "trainer.devices=1 precision=bf16-mixed data.batch_size=8 "
        "trainer.accumulate_grad_batches=1 model.gradient_checkpointing=false"
    )
    assert options[1]["overrides"].startswith("trainer.devices=2 trainer=ddp ")
    assert options[1]["setting"]["micro_batch"] == 4  # the same effective batch over 2
    # Step time: FLOPs over the GPUs' dense peak x MFU x 0.9 per doubling.
    rate = {o["count"]: o["setting"]["step_s"] for o in options[:4]}
    for count in (2, 4, 8):
        assert rate[1] / rate[count] == pytest.approx(count * 0.9 ** math.log2(count))
    t4_peak, h100_peak = (
        find_card("T4").peak_flops("float16"),
        find_card("H100").peak_flops("bfloat16"),
    )
    assert t4["setting"]["step_s"] / h100["setting"]["step_s"] == pytest.approx(h100_peak / t4_peak)
    # Cost: hours x cards x the price per card-hour.
    for o, price, spot_price, mtbf in ((h100, 2.99, 1.6, 6), (options[3], 2.99, 1.6, 6),
                                       (t4, 0.35, 0.12, 24)):  # fmt: skip
        assert o["total_s"] == pytest.approx(o["setting"]["step_s"] * 1000)
        assert o["on_demand"] == pytest.approx(o["total_s"] / 3600 * o["count"] * price)
        save = economics.SAVE_FIXED_S + 1e-9 * sum(  # the estimate, without a run
            p.numel() * 4 * 3 for p in budget.from_config(make_cfg(*TINY_GPT)).module.parameters()
        )
        spot = economics.spot(o["total_s"], o["setting"]["step_s"], save, 120.0, mtbf * 3600)
        assert o["spot"]["wall_s"] == pytest.approx(spot.wall_s)
        assert o["spot_cost"] == pytest.approx(spot.wall_s / 3600 * o["count"] * spot_price)


def test_the_table_gives_each_cards_cheapest_then_fastest(capsys):
    plan.main([*TINY_GPT, "trainer.max_steps=1000", "--cards", "A100", "--prices", str(PRICES)])
    out = capsys.readouterr().out
    rows = [line.split("  ") for line in out.splitlines() if line.startswith("A100 ")]
    cells = [[c.strip() for c in row if c.strip()][:4] for row in rows]
    assert [c[:3] for c in cells] == [["A100", "cheapest", "1"], ["A100", "fastest", "8"]]
    # One GPU runs no DDP: its setting names no strategy; eight GPUs' names ddp.
    assert cells[0][3] == "bf16-mixed, 8x1" and cells[1][3] == "bf16-mixed, 1x1, ddp"
    assert "prices: " in out and "(2026-12-01)" in out


def test_the_plan_picks_what_fits_a_small_card(make_cfg):
    subject = budget.from_config(make_cfg(*TINY_GPT, "trainer=cpu"))
    subject.attention = "fused"
    work = search.Work(8, 1e9, 4e9 / 3)
    whole = subject.row("bf16-mixed", False, 8).total
    half = subject.row("bf16-mixed", False, 4).total
    card = Card("test card", 1, (whole - 1) / 2**30, {"bfloat16": 100.0, "float32": 10.0})
    assert half < card.memory_bytes < whole
    best = search.settings(subject, work, card, 1, 0.5, 0.9)[0]
    assert (best.precision, best.micro_batch, best.accumulate) == ("bf16-mixed", 4, 2)
    assert best.checkpointing is False and best.memory == half
    assert best.step_s == pytest.approx(1e9 * 8 / (100e12 * 0.5))


def test_young_daly_interval_as_optimizer_steps():
    found = economics.spot(total_s=36000, step_s=2.0, save_s=30, restart_s=120, mtbf_s=6 * 3600)
    interval = math.sqrt(2 * 30 * 6 * 3600)  # 1138 s
    assert found.every_n_train_steps == round(interval / 2.0)
    assert found.wall_s == pytest.approx(
        36000 + 36000 / found.interval_s * 30 + 36000 / (6 * 3600) * (found.interval_s / 2 + 120)
    )
    short = economics.spot(total_s=600, step_s=2.0, save_s=30, restart_s=120, mtbf_s=6 * 3600)
    assert short.every_n_train_steps == 300  # shorter than the interval: save at the end only
    assert short.wall_s == pytest.approx(600 + 30 + 600 / (6 * 3600) * (300 + 120))


def test_a_run_records_what_plan_reads(make_cfg, tmp_path, capsys):
    cfg = make_cfg(*TINY_GPT, "trainer=cpu", "trainer.max_steps=4",
                   "checkpoint.every_n_train_steps=2", "test=false")  # fmt: skip
    train(cfg)
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert 0 < record["checkpoint_save_s"] < 60 and record["restart_s"] > 0
    phases = record["restart_phases_s"]
    assert list(phases) == ["start_to_trainer", "data_ready", "restore",
                            "sanity_check", "to_first_step", "first_step", "compile"]  # fmt: skip
    before_step = sum(phases[k] for k in list(phases)[:5])
    assert before_step == pytest.approx(record["restart_s"], abs=0.01)
    assert phases["start_to_trainer"] > 0 and phases["first_step"] > 0
    found = economics.from_run(tmp_path / "run")
    restart = record["restart_s"] + phases["compile"]  # full speed once the first step is done
    assert (found.save_s, found.restart_s) == (record["checkpoint_save_s"], restart)
    capsys.readouterr()
    planned = run_plan(capsys, "--cards", "L4", "--prices", str(PRICES),
                       "--from-run", str(tmp_path / "run"))  # fmt: skip
    assert planned["restarts"].startswith("measured save and restart in ")
    first = planned["options"][0]
    expected = economics.spot(first["total_s"], first["setting"]["step_s"],
                              record["checkpoint_save_s"], restart, 24 * 3600)  # fmt: skip
    assert first["spot"]["wall_s"] == pytest.approx(expected.wall_s)


@pytest.mark.parametrize(
    ("args", "prices", "message"),
    [
        (["--mfu", "0"], None, "--mfu=0.0 must be in (0, 1]"),
        (["--mfu", "1.5"], None, "--mfu=1.5 must be in (0, 1]"),
        (["--mtbf", "-1"], None, "--mtbf=-1.0 must be a number of hours above 0"),
        (["--cards", "B200"], None, "--cards: 'B200' is not a card of litforge.planning.hardware"),
        ([], "cards:\n  B200: {on_demand: 5}\n", "cards.B200 is not a card of litforge"),
        ([], "cards:\n  H100: {on_demand: -2}\n", "cards.H100.on_demand=-2 must be a price >= 0"),
        (
            [],
            "cards:\n  H100: {spot: 1, mtbf_hours: 0}\n",
            "mtbf_hours=0 must be a number of hours",
        ),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, prices, message):
    if prices is not None:
        (tmp_path / "prices.yaml").write_text(prices)
        args = [*args, "--prices", str(tmp_path / "prices.yaml")]
    with pytest.raises(SystemExit) as stop:
        plan.main([*TINY_GPT, *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    if "litforge.planning.hardware (" in err or "(one of: " in err:
        assert all(c.name in err for c in CARDS)


@pytest.mark.gpu
def test_the_plans_step_time_against_a_measured_one_on_this_gpu(make_cfg, tmp_path, capsys):
    import csv

    from litforge.planning.hardware import current_card

    card = current_card()
    assert card is not None, "a GPU the table knows"
    shape = ["experiment=gpt_char", "model.net.n_layer=8", "model.net.n_embd=512",
             "model.net.n_head=8", "data.block_size=512", "data.batch_size=16",
             "precision=bf16-mixed"]  # fmt: skip
    train(make_cfg(*shape, "trainer.max_steps=60", "trainer.log_every_n_steps=10", "test=false"))
    with open(tmp_path / "run" / "csv" / "metrics.csv", newline="") as file:
        rates = [float(r["train/device/batches_per_sec"]) for r in csv.DictReader(file)
                 if r.get("train/device/batches_per_sec")]  # fmt: skip
    measured = 1 / rates[-1]
    plan.main([*shape, "--cards", card.name, "--json"])
    planned = json.loads(capsys.readouterr().out)["options"][0]["setting"]["step_s"]
    print(
        f"{card.name}: planned {planned * 1000:.1f} ms/step at MFU 0.35, measured {measured * 1000:.1f}"
    )
    assert 0.1 < measured / planned < 10
