"""Names the add-on gives to what it adds to the user's object, in one place: the bake's shape
keys and its cache modifier are found again by these names (and never the user's own)."""

CACHE_MODIFIER_NAME = "Face Physics cache"
BAKE_KEY_PREFIX = "FP bake "
