"""Moderation: moderators that judge prompts, images and video frames (contracts/moderation.py),
the text policy, the hosted moderators, and the chain that runs them per platform and tenant."""
