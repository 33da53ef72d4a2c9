"""User tools: check-method (check_method), new-method (new_method), doctor, verify (re-run
shipped cells and compare their numbers), the method table (method_table) and hyper-parameter
tuning (tuning)."""
