"""One module per node of the query graph."""
