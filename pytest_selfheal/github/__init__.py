"""github."""
