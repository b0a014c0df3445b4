"""One module per mapper pair, named <src>_to_<dst>.py; each registers its edge in the routing graph."""
