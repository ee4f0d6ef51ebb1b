"""Import graph: a manual file becomes chunks in Milvus."""
