/*
 * blobcr_agent._native.Mirror: the CPython object around the mirror
 * core (core.h), shared by the binding (mirror.c) and the libfuse3
 * request loop (fuseloop.c).
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#ifndef BLOBCR_MIRROR_H
#define BLOBCR_MIRROR_H

#include <Python.h>

#include "core.h"

typedef struct {
    PyObject_HEAD
    MirrorCore core;
} Mirror;

extern PyTypeObject MirrorType;

#endif
