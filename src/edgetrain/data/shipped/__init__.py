"""Real data sets read offline from files inside installed packages."""
