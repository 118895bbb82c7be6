"""The site's theme set-up, checked without a build: versions, favicon, template overrides."""

from __future__ import annotations

import re
from importlib.metadata import requires, version
from pathlib import Path

import pytest
import yaml
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "book" / "_templates"
FAVICON = ROOT / "book" / "_static" / "favicon.ico"


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def test_theme_pair_is_the_one_the_book_theme_declares() -> None:
    """sphinx-book-theme pins pydata-sphinx-theme; requirements.txt pins the same pair."""
    declared = [r for r in requires("sphinx-book-theme") or []
                if re.match(r"pydata-sphinx-theme\b", r) and "extra ==" not in r]
    assert declared == [f"pydata-sphinx-theme=={version('pydata-sphinx-theme')}"], declared
    pins = (ROOT / "requirements.txt").read_text()
    assert f"pydata-sphinx-theme=={version('pydata-sphinx-theme')}\n" in pins
    assert f"sphinx-book-theme=={version('sphinx-book-theme')}\n" in pins


@pytest.mark.parametrize("template", sorted(TEMPLATES.glob("*.html")), ids=lambda p: p.name)
def test_template_overrides_a_component_of_the_installed_theme(template: Path) -> None:
    """Each override replaces a theme component of the same name, copied from this version.

    A theme upgrade fails here, so whoever upgrades compares the override with the new
    component (and drops it if the theme has fixed the accessible name).
    """
    import pydata_sphinx_theme

    theme = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme"
    assert (theme / "components" / template.name).is_file(), template.name
    installed = version("pydata-sphinx-theme")
    assert f"pydata-sphinx-theme {installed}'s" in template.read_text(), \
        f"{template.name} was copied from another version than {installed}"


def test_overrides_name_buttons_by_what_they_show() -> None:
    search = (TEMPLATES / "search-button-field.html").read_text()
    assert "aria-label" not in search.split("#}")[-1]
    switcher = (TEMPLATES / "theme-switcher.html").read_text().split("#}")[-1]
    assert "title=" not in switcher.replace("data-bs-title=", "")
    assert switcher.count('aria-hidden="true"') == 3


def test_config_uses_the_templates_and_the_favicon() -> None:
    sphinx = config()["sphinx"]["config"]
    assert sphinx["templates_path"] == ["book/_templates"]
    assert config()["html"]["favicon"] == "book/_static/favicon.ico"
    assert "book/_static/favicon.ico" in sphinx["html_extra_path"]


def test_favicon_is_a_small_icon_in_two_sizes() -> None:
    assert FAVICON.stat().st_size < 4096
    icon = Image.open(FAVICON)
    assert icon.format == "ICO"
    assert icon.info["sizes"] == {(16, 16), (32, 32)}
    for size in icon.info["sizes"]:
        icon.size = size
        image = icon.copy().convert("RGBA")
        assert image.getbbox() is not None, f"the {size} icon is empty"
        assert len(image.getcolors(maxcolors=1024) or []) > 3, f"the {size} icon is one colour"
