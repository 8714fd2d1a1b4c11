"""The ground floor of pipelines/: pure helpers every other room may use, importing none of them."""
