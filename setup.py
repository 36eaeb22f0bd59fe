"""Only the C extension lives here; the project's metadata is in pyproject.toml.

dashboard.engine._scan reads trace events into columns without a Python object per event (see
dashboard/engine/_scan.c). It is optional: where it cannot be built (no C compiler), the loader
reads every file through msgspec, with the same results, more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dashboard.engine._scan",
            ["dashboard/engine/_scan.c"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
