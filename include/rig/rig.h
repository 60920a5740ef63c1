/* SPDX-License-Identifier: MIT */
#ifndef RIG_RIG_H
#define RIG_RIG_H
/*
 * rig: reliable-connected RDMA queue pairs whose every failure has a
 * defined, ordered outcome. Include this header for the whole API.
 */
#include <rig/version.h>
#include <rig/nic.h>
#include <rig/region.h>
#include <rig/endpoint.h>
#include <rig/qp.h>
#include <rig/wait.h>
#include <rig/loop.h>
#include <rig/cm.h>

#endif
