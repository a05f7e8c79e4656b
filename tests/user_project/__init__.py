"""A user's own code, written the way Lightning and lightning-hydra-template users write it
(no litforge class anywhere), and its config directory `conf/`, added to a run with
`hydra.searchpath=[file://.../tests/user_project/conf]` or `[pkg://tests.user_project.conf]`."""
