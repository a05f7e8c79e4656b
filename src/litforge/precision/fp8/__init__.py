"""precision=fp8 (tensorwise) and precision=fp8-rowwise: torchao's float8 training.

The Linear layers whose shapes suit FP8 (`layers`) become torchao `Float8Linear`s, under
bfloat16 autocast (the option's trainer.precision=bf16-mixed). A Float8Linear keeps its
weight a plain float32 Parameter under the same name, so checkpoints hold plain weights:
an fp8 run's checkpoint loads into a bf16 or float32 run and back.

The conversion happens when the model is built (`litforge.build.build_module`), before
`torch.compile`, before `configure_model` shards the blocks under trainer=fsdp (FSDP2
tracks the modules that own each parameter, so a layer swapped after `fully_shard` would
never see its gathered weight), and before `configure_optimizers` (the parameters are
the same objects before and after). Lightning's precision connector takes no custom
precision name (pytorch-lightning #21425) and calls a plugin's `convert_module` only
after `configure_model` under ModelParallelStrategy, which is too late for FSDP2; so
litforge converts at build, and `Float8Precision` (a Lightning plugin) serves the memory
budget and plain Lightning users (`Trainer(plugins=[Float8Precision()])`, one process or
DDP).

torchao is the `litforge[fp8]` extra, imported only here, only when fp8 is asked for.
"""
