"""Charts: pure functions from DataFrames to Altair charts (no Streamlit)."""
