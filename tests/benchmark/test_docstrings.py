"""A docstring's summary is its whole first paragraph: the rewrap to 100 columns wraps summaries
over lines, and the method table, the site and ``list`` show them whole."""

from benchmark.core.docstrings import summary


def test_summary_joins_the_wrapped_first_paragraph_and_stops_at_the_blank_line() -> None:
    doc = """Central-SSL: SimCLR on the pooled data of all clients, same budget as the
    federated cells.

    Details that are not the summary.
    """
    assert summary(doc) == (
        "Central-SSL: SimCLR on the pooled data of all clients, same budget as the federated cells."
    )
    assert summary(None) == "" and summary("One line.") == "One line."
