"""LangGraph graphs: importing (manual -> Milvus) and query (question -> answer)."""
