"""Text checks: `similarity` (the duplicate gate) and `validation` (a draft's output)."""
