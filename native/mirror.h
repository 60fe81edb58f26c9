/*
 * Copyright 2026 The BlobCR for OpenStack Authors
 *
 *    Licensed under the Apache License, Version 2.0 (the "License"); you may
 *    not use this file except in compliance with the License. You may obtain
 *    a copy of the License at
 *
 *         http://www.apache.org/licenses/LICENSE-2.0
 *
 *    Unless required by applicable law or agreed to in writing, software
 *    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 *    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 *    License for the specific language governing permissions and limitations
 *    under the License.
 */

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
    /* The last commit()'s times (ns), copied from the core by the
     * calling thread: commit_times() reads them without the lock. */
    int64_t commit_wait_ns, commit_held_ns, commit_drain_ns;
} Mirror;

extern PyTypeObject MirrorType;

#endif
