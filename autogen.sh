#!/bin/sh
# SPDX-License-Identifier: MIT
# Generates configure and Makefile.in from a fresh clone.
set -e
cd "$(dirname "$0")"
autoreconf -fi
