"""Built-in checks, one module per concern. Importing a module registers its checks."""
