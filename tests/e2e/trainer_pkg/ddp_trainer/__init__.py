"""A small DDP trainer shipped as a package (raydbg's tests install it into a site-packages directory)."""
