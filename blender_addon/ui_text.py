"""Text for panels: long messages broken into lines a sidebar label can show."""


def wrap(text: str, width: int):
    """The words of `text` in lines of at most `width` characters (a longer word stands alone)."""
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            yield line
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        yield line
