"""Sources: everything that turns files into Reports (bundle, libpva, discovery)."""
