"""User tools: check-method (check_method), new-method (new_method), doctor, the method table
(method_table) and hyper-parameter tuning (tuning)."""
