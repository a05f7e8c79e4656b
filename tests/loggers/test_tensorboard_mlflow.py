"""TensorBoard and MLflow (its SQLite store), for real, in the run directory."""

from __future__ import annotations

import pytest

from litforge.errors import ConfigError
from litforge.tracking.mlflow_logger import ID_FILE, mlflow_logger
from litforge.training import train


def test_tensorboard_writes_events_in_the_run_directory(make_cfg, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(make_cfg("logger=tensorboard", "debug=limit"))
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/loss")] == [2, 5]  # Lightning logs step - 1
    assert "final/text_summary" in events.Tags()["tensors"]


def test_mlflow_records_config_facts_and_final_values_and_resumes_its_run(make_cfg, tmp_path):
    import mlflow

    metrics = train(make_cfg("logger=mlflow", "debug=limit"))
    run_dir = tmp_path / "run"
    run_id = (run_dir / ID_FILE).read_text().strip()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{run_dir}/mlflow.db")
    run = client.get_run(run_id)
    assert run.data.params["config/model/optimizer/lr"] == "0.003"
    assert run.data.params["run/effective_batch_size"] == "64"
    assert run.data.tags["best_checkpoint"] == metrics["best_checkpoint"]
    assert [m.step for m in client.get_metric_history(run_id, "val/loss")] == [2, 5]
    train(make_cfg("logger=mlflow", "debug=limit", "trainer.max_epochs=3"))  # resumes
    assert (run_dir / ID_FILE).read_text().strip() == run_id
    assert [m.step for m in client.get_metric_history(run_id, "val/loss")] == [2, 5, 8]


def test_an_unreachable_tracking_server_is_named_before_training(tmp_path):
    with pytest.raises(ConfigError, match=r"tracking_uri=http://127.0.0.1:9: the tracking server"):
        mlflow_logger(save_dir=str(tmp_path), tracking_uri="http://127.0.0.1:9", timeout_s=2)


def test_sweep_trials_are_nested_under_one_parent_run(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    trials = [mlflow_logger(save_dir=str(tmp_path / str(i)), tracking_uri=uri, parent_run="study")
              for i in range(2)]  # fmt: skip
    client = mlflow.MlflowClient(tracking_uri=uri)
    parents = {client.get_run(t.run_id).data.tags["mlflow.parentRunId"] for t in trials}
    (parent,) = parents
    assert client.get_run(parent).data.tags["litforge.parent"] == "study"


def _events(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))  # purges as TensorBoard does
    events.Reload()
    return events


def test_tensorboard_hparams_view_holds_the_config_and_final_metrics(make_cfg, tmp_path):
    from tensorboard.plugins.hparams import plugin_data_pb2

    metrics = train(make_cfg("logger=tensorboard", "debug=limit"))
    content = _events(tmp_path / "run").PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["config/model/optimizer/lr"].number_value == pytest.approx(3e-3)
    assert hparams["run/effective_batch_size"].number_value == 64
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    tags = {m.name.tag for m in experiment.experiment.metric_infos}
    assert {"hp/test/acc", "hp/val/loss"} <= tags
    assert _events(tmp_path / "run").Scalars("hp/test/acc")[0].value == pytest.approx(
        metrics["test/acc"]
    )


def test_a_resumed_run_shows_each_step_once_in_tensorboard(make_cfg, tmp_path):
    args = ["logger=tensorboard", "debug=limit", "trainer.log_every_n_steps=1", "run_name=tb",
            "checkpoint.every_n_train_steps=2", "test=false"]  # fmt: skip
    crash = ["+callbacks.crash._target_=tests.helpers.RaiseAtStep", "+callbacks.crash.step=5"]
    with pytest.raises(RuntimeError, match="crash at step 5"):
        train(make_cfg(*args, *crash))  # steps 0-4 logged, the newest checkpoint is step 4
    train(make_cfg(*args))  # resumes from step 4 and logs steps 4 and 5 again
    steps = [e.step for e in _events(tmp_path / "run").Scalars("train/loss_step")]
    assert steps == sorted(set(steps)) and steps[-1] == 5
    # What tells every TensorBoard reader to drop the first attempt's steps >= 4: the
    # resumed writer's file starts with a SessionLog START at step 4 (purge_step).
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    starts = []
    for file in sorted((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*")):
        events = [e for e in EventFileLoader(str(file)).Load() if not e.HasField("file_version")]
        starts += [e.step for e in events[:1] if e.session_log.status == SessionLog.START]
    assert starts == [4]
