"""One module per node of the import graph."""
