"""What the subcommands run (``benchmark/cli/`` parses their arguments and calls here):
check-method (check_method), check-result (check_result), new-method (new_method), new-task
(new_task), doctor, verify (re-run shipped cells and compare their numbers), the smoke run (smoke),
the method table (method_table) and hyper-parameter tuning (tuning). Formerly ``benchmark.tools``."""
