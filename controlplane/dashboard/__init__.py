"""Server-rendered pages of the dashboard; thin views over the apps' services and selectors."""
