/* SPDX-License-Identifier: MIT */
/* Argument checks that need no device (rig(7) C1, C2). */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <rig/rig.h>

Test(args, C2_null_out_pointers)
{
	cr_assert_eq(rig_nic_open(NULL, NULL), -EINVAL);
	cr_assert_eq(rig_qp_make(NULL, NULL), -EINVAL);
	cr_assert_eq(rig_region_register(NULL, NULL, 0, NULL), -EINVAL);
	cr_assert_eq(rig_region_deregister(NULL), -EINVAL);
	cr_assert_eq(rig_qp_connect(NULL, NULL), -EINVAL);
	cr_assert_eq(rig_qp_destroy(NULL), -EINVAL);
	cr_assert_eq(rig_nic_close(NULL), -EINVAL);
	cr_assert_eq(rig_nic_events(NULL), -EINVAL);
	cr_assert_eq(rig_nic_set_depth(NULL, 8), -EINVAL);
}

/* C1: a constructor fills its out-pointer only on success. */
Test(args, C1_open_unknown_device)
{
	struct rig_nic *nic = (struct rig_nic *)0x1;

	cr_assert_eq(rig_nic_open("no-such-device0", &nic), -ENODEV);
	cr_assert_eq(nic, (struct rig_nic *)0x1);
	cr_assert_not_null(strstr(rig_errmsg(), "no-such-device0"), "%s",
			   rig_errmsg());
}

/* C1: the message is per thread, and says something before any failure. */
Test(args, C1_errmsg_default)
{
	cr_assert_str_eq(rig_errmsg(), "no error");
}

Test(args, C2_failure_of_null)
{
	cr_assert_eq(rig_qp_failure(NULL, NULL), -EINVAL);
}
