/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include "t_device.h"
