"""One module per subcommand of ``python -m benchmark`` (benchmark/cli.py parses the arguments and
maps each name to its module's ``cmd_*``): run, list (listing), plan, show, status, collect,
prefetch, new-method, new-task, check-method, submit, accept, doctor, verify. Beside them, what
those commands run that is theirs alone: check-method's checks (check_result, smoke, state_checks,
state_digests, live_settings), doctor's calibration (calibrate), verify's kernel fingerprint
(kernel_fingerprint, kernel_census), and two tools run with ``python -m``: the method table
(method_table) and hyper-parameter tuning (tuning)."""
