"""The localisation benchmark's real regressions (``run.py --corpus regressions``).

A release N that had a bug, and release N+1 that fixed it and added or changed a test that
fails on N's code (as BugsInPy collects them from project histories; here from two pinned
PyPI sdists, the only source this machine reaches). A case is N's sdist with N+1's versions
of the test files that hold the fixing tests, run on N's code; its answer is the function
(or functions) the fix changed, found by comparing the two releases' functions.

Where N has several of a release's bugs, each bug is its own case: the other bugs' tests
are deselected, so exactly one bug's tests fail. N+1's tests of new features (a parameter
N lacks) fail on N for no bug: they are deselected too (``features``), as are tests whose fix
is not in a function (a keyword table, a module-level pattern). Both sdists are
downloaded once to the cache beside the mutants' projects; no third-party code is committed.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from typing import NamedTuple

import pypi


class Bug(NamedTuple):
    tests: tuple[str, ...]  # N+1's node ids that fail on N's code because of this bug
    functions: tuple[tuple[str, str], ...]  # (path, qualified name): what the fix changed in N's code
    note: str


class Release(NamedTuple):
    project: str  # the PyPI name
    old: str  # N: the release with the bugs
    new: str  # N+1: the release that fixed them
    bring: tuple[str, ...]  # the test files copied from N+1 over N's
    tests: tuple[str, ...]  # pytest's arguments selecting the tests run
    src: str  # FauxPy's ``--src``
    bugs: tuple[Bug, ...]
    exclude: str = ""  # FauxPy's ``--exclude``
    options: tuple[str, ...] = ()
    features: tuple[str, ...] = ()  # N+1's tests failing on N for no case's bug (deselected)


_DATEUTIL_TESTS = ("dateutil/test/test_isoparser.py", "dateutil/test/test_parser.py", "dateutil/test/test_tz.py")
_MORE_FEATURES = tuple(f"tests/test_more.py::{t}" for t in (
    "SortTogetherTest::test_strict", "CircularShiftsTests::test_steps_negative",
    "CircularShiftsTests::test_steps_positive", "CircularShiftsTests::test_steps_zero",
    "SetPartitionsTests::test_max_size", "SetPartitionsTests::test_min_size", "SampleTests::test_counts",
    "SampleTests::test_counts_all", "SampleTests::test_strict"))
_SPECIFIERS = "tests/test_specifiers.py::TestSpecifier::"
_SRC = ("-o", "pythonpath=src", "-p", "no:warnings")
_JINJA_313 = ("tests/test_ext.py", "tests/test_filters.py", "tests/test_inheritance.py")
_JINJA_315 = ("tests/test_compile.py", "tests/test_filters.py", "tests/test_loader.py", "tests/test_regression.py",
              "tests/test_utils.py")
_CLICK_814 = ("tests/test_defaults.py", "tests/test_formatting.py", "tests/test_utils.py")

RELEASES: list[Release] = [
    # Its pytest configuration turns warnings into errors, and pytest 9 warns at its collection.
    Release("python-dateutil", "2.8.1", "2.8.2", _DATEUTIL_TESTS, _DATEUTIL_TESTS, "dateutil", exclude="[dateutil/test]",
            options=("-p", "no:warnings"), bugs=(
                Bug(("dateutil/test/test_isoparser.py::test_iso_raises[20120425T01:2000-ValueError]",),
                    (("dateutil/parser/isoparser.py", "isoparser._parse_isotime"),),
                    "isoparse accepted a time with an inconsistent ':' separator"),
                Bug(("dateutil/test/test_isoparser.py::test_parse_isodate_error_text",),
                    (("dateutil/parser/isoparser.py", "isoparser.parse_isodate"),),
                    "b'' prefixes in parse_isodate's error message"),
                Bug(("dateutil/test/test_parser.py::TestOutOfBounds::test_illegal_month_error",),
                    (("dateutil/parser/_parser.py", "parser.parse"),),
                    "a non-ValueError raised while handling a parse error"),
                Bug(("dateutil/test/test_tz.py::test_gettz_same_result_for_none_and_empty_string",),
                    (("dateutil/tz/tz.py", "__get_gettz"),),
                    "tz.gettz('') did not return the local time zone"),
            )),
    Release("more-itertools", "10.3.0", "10.4.0", ("tests/test_more.py",), ("tests/test_more.py",), "more_itertools",
            features=_MORE_FEATURES, bugs=(
                Bug(tuple(f"tests/test_more.py::DistinctPermutationsTests::{t}"
                          for t in ("test_unhashable", "test_unsortable", "test_unsorted_equivalent")),
                    (("more_itertools/more.py", "distinct_permutations"),),
                    "distinct_permutations on unsortable items, and on equal items out of order"),
                Bug(("tests/test_more.py::SeekableTest::test_relative_seek",),
                    (("more_itertools/more.py", "seekable.relative_seek"),),
                    "seekable.relative_seek forgot earlier relative seeks"),
            )),
    Release("packaging", "24.1", "24.2", ("tests/test_specifiers.py", "tests/test_version.py"),
            ("tests/test_specifiers.py",), "src", options=("-o", "pythonpath=src"),
            features=("tests/test_specifiers.py::TestSpecifierSet::test_create_from_specifiers",), bugs=(
                Bug((f"{_SPECIFIERS}test_specifier_prereleases_detection[<1.0.dev1-True]",
                     f"{_SPECIFIERS}test_specifier_prereleases_detection[>1.0.dev1-True]",
                     f"{_SPECIFIERS}test_specifier_filter[>2.0a1-None-input5-expected5]",
                     f"{_SPECIFIERS}test_specifier_filter[<2.0a1-None-input6-expected6]"),
                    (("src/packaging/specifiers.py", "Specifier.prereleases"),),
                    "'>' and '<' specifiers of a pre-release did not allow pre-releases"),
            )),
    Release("packaging", "24.1", "24.2", ("tests/test_markers.py",), ("tests/test_markers.py",), "src",
            options=("-o", "pythonpath=src"), bugs=(
                Bug(("tests/test_markers.py::TestMarker::test_python_full_version_untagged_user_provided",),
                    (("src/packaging/markers.py", "Marker.evaluate"),),
                    "a user-provided python_full_version ending in '+' was not repaired"),
            )),
    Release("boltons", "24.0.0", "24.1.0", ("tests/test_typeutils.py",), ("tests/test_typeutils.py",), "boltons",
            options=("--noconftest",), bugs=(
                Bug(("tests/test_typeutils.py::test_sentinel_copy",), (("boltons/typeutils.py", "make_sentinel"),),
                    "a sentinel's copy was another object"),
            )),
    Release("jinja2", "3.1.2", "3.1.3", _JINJA_313, _JINJA_313, "src", options=_SRC, bugs=(
        Bug(("tests/test_ext.py::TestInternationalization::test_nested_trans_error",
             "tests/test_ext.py::TestInternationalization::test_trans_block_error"),
            (("src/jinja2/ext.py", "InternationalizationExtension._parse_block"),),
            "a tag nested in {% trans %} gave an unhelpful error"),
        Bug(("tests/test_filters.py::TestFilter::test_xmlattr_key_with_spaces",),
            (("src/jinja2/filters.py", "do_xmlattr"),), "xmlattr accepted keys with spaces"),
        Bug(("tests/test_inheritance.py::TestInheritance::test_invalid_required",),
            (("src/jinja2/parser.py", "Parser.parse_block"),), "a required block with content was accepted"),
    )),
    Release("jinja2", "3.1.4", "3.1.5", _JINJA_315, _JINJA_315, "src", options=_SRC,
            features=("tests/test_compile.py::test_top_level_set_vars_unpacking_deterministic",
                      "tests/test_compile.py::test_loop_set_vars_unpacking_deterministic",
                      "tests/test_compile.py::test_block_set_vars_unpacking_deterministic",
                      "tests/test_utils.py::test_pickle_missing", "tests/test_utils.py::test_copy_missing"), bugs=(
                Bug(("tests/test_compile.py::test_undefined_import_curly_name",),
                    (("src/jinja2/compiler.py", "CodeGenerator.visit_FromImport"),),
                    "a template name with braces broke an undefined import's message"),
                Bug(("tests/test_filters.py::TestFilter::test_int[1e10000-0]",),
                    (("src/jinja2/filters.py", "do_int"),), "the int filter overflowed on a huge float string"),
                Bug(("tests/test_loader.py::TestFileSystemLoader::test_error_includes_paths",),
                    (("src/jinja2/loaders.py", "FileSystemLoader.get_source"),),
                    "a missing template's error did not name the searched paths"),
                Bug(("tests/test_loader.py::test_package_loader_no_dir",),
                    (("src/jinja2/loaders.py", "PackageLoader.__init__"),),
                    "PackageLoader of a missing folder gave an unclear error"),
                Bug(("tests/test_regression.py::TestBug::test_pass_context_with_select",),
                    (("src/jinja2/filters.py", "prepare_select_or_reject"),),
                    "select with a pass_context test failed"),
                Bug(("tests/test_regression.py::test_load_parameter_when_set_in_all_if_branches",),
                    (("src/jinja2/idtracking.py", "Symbols.branch_update"),),
                    "a macro parameter set in every if branch was read as undefined"),
                Bug(("tests/test_utils.py::TestEscapeUrlizeTarget::test_urlize_mail_mastodon",),
                    (("src/jinja2/utils.py", "urlize"),), "urlize linked a Mastodon handle as an email"),
            )),
    Release("sqlparse", "0.4.3", "0.4.4", ("tests/test_regressions.py",), ("tests/test_regressions.py",), "sqlparse",
            bugs=(
                Bug(("tests/test_regressions.py::test_comment_between_cte_clauses_issue632",),
                    (("sqlparse/sql.py", "Statement.get_type"),), "a comment between CTEs hid the statement's type"),
            )),
    Release("sqlparse", "0.4.4", "0.5.0", ("tests/test_regressions.py", "tests/test_split.py"),
            ("tests/test_regressions.py", "tests/test_split.py"), "sqlparse",
            features=("tests/test_regressions.py::test_primary_key_issue740",
                      "tests/test_regressions.py::test_max_recursion",
                      "tests/test_split.py::test_split_strip_semicolon"), bugs=(
                Bug(("tests/test_regressions.py::test_copy_issue672",),
                    (("sqlparse/tokens.py", "_TokenType.__getattr__"),), "a token type could not be copied"),
                Bug(("tests/test_split.py::test_split_go",),
                    (("sqlparse/engine/statement_splitter.py", "StatementSplitter.process"),),
                    "GO with a count did not end a statement"),
            )),
    Release("sqlparse", "0.5.0", "0.5.1", ("tests/test_format.py",), ("tests/test_format.py",), "sqlparse",
            features=("tests/test_format.py::TestFormat::test_strip_comments_multi",
                      "tests/test_format.py::TestFormat::test_strip_comments_preserves_whitespace",
                      "tests/test_format.py::test_compact"), bugs=(
                Bug(("tests/test_format.py::test_strip_ws_removes_trailing_ws_in_groups",),
                    (("sqlparse/filters/others.py", "StripWhitespaceFilter._stripws_parenthesis"),),
                    "strip_whitespace left trailing space in a parenthesis"),
            )),
    Release("sqlparse", "0.5.1", "0.5.2", ("tests/test_format.py",), ("tests/test_format.py",), "sqlparse", bugs=(
        Bug(("tests/test_format.py::TestFormat::test_strip_comments_preserves_hint",),
            (("sqlparse/filters/others.py", "StripCommentsFilter._process"),), "strip_comments dropped optimizer hints"),
    )),
    Release("marshmallow", "3.19.0", "3.20.0", ("tests/test_deserialization.py",), ("tests/test_deserialization.py",),
            "src", options=_SRC, features=("tests/test_deserialization.py::TestValidation::test_nested_partial_default",),
            bugs=(
                Bug(("tests/test_deserialization.py::TestFieldDeserialization::test_oversized_timestamp_field_deserialization",),
                    (("src/marshmallow/utils.py", "from_timestamp"),),
                    "an oversized timestamp raised OverflowError, not a validation error"),
            )),
    Release("marshmallow", "3.21.0", "3.21.1", ("tests/test_schema.py",), ("tests/test_schema.py",), "src",
            options=_SRC, bugs=(
                Bug(("tests/test_schema.py::test_fields_must_be_declared_as_instances",),
                    (("src/marshmallow/schema.py", "Schema._bind_field"),),
                    "a field declared as a class gave an unclear error"),
            )),
    Release("click", "8.1.3", "8.1.4", _CLICK_814, _CLICK_814, "src", options=_SRC,
            features=("tests/test_utils.py::test_filename_formatting",), bugs=(
                Bug(("tests/test_defaults.py::test_multiple_flag_default",),
                    (("src/click/core.py", "Option.__init__"),), "a multiple flag's default was not a tuple"),
                Bug(("tests/test_formatting.py::test_truncating_docstring_no_help",),
                    (("src/click/core.py", "Command.format_help_text"),),
                    "a docstring's truncation marker shown without help"),
                Bug(("tests/test_utils.py::test_echo_no_streams",),
                    (("src/click/utils.py", "echo"),), "echo failed when there is no stdout"),
                Bug(("tests/test_utils.py::test_detect_program_name",),
                    (("src/click/utils.py", "_detect_program_name"),),
                    "python -m of a module beside its package named the wrong program"),
            )),
]


class Case(NamedTuple):
    """One bug: how to build and run its project, and its answer."""

    release: Release
    bug: Bug

    @property
    def key(self) -> str:
        return f"{self.release.new}:{self.bug.tests[0]}"

    @property
    def stem(self) -> str:
        """The cache files' name: N's sdist."""
        return f"{self.release.project}-{self.release.old}"

    def deselected(self) -> tuple[str, ...]:
        """The node ids this case does not run: N+1's feature tests and the release's other bugs'."""
        others = [t for bug in self.release.bugs if bug is not self.bug for t in bug.tests]
        return (*self.release.features, *others)

    def build(self, root: Path) -> None:
        """N's sdist below ``root`` with N+1's test files over it."""
        old = pypi.unpacked_sdist(self.release.project, self.release.old)
        new = pypi.unpacked_sdist(self.release.project, self.release.new)
        shutil.copytree(old, root, dirs_exist_ok=True)
        for rel in self.release.bring:
            shutil.copyfile(new / rel, root / rel)


def cases() -> list[Case]:
    """Every bug of every release, in declaration order."""
    return [Case(release, bug) for release in RELEASES for bug in release.bugs]


def span(root: Path, path: str, function: str) -> tuple[int, int]:
    """The lines of ``function`` (a qualified name) in ``root/path``, decorators included
    (the first definition where a property's getter and setter share the name)."""
    tree = ast.parse((root / path).read_text(encoding="utf-8"))
    body: list[ast.stmt] = tree.body
    *outer, name = function.split(".")
    for part in outer:
        body = next(s.body for s in body if isinstance(s, ast.ClassDef) and s.name == part)
    node = next(s for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return first, node.end_lineno or node.lineno
