/* tokenhost plugin ABI: everything a plugin needs, in one include. */
#ifndef TOKENHOST_TOKENHOST_H
#define TOKENHOST_TOKENHOST_H

#include "th_common.h"
#include "th_host_api.h"
#include "th_attention.h"
#include "th_constraint.h"
#include "th_kvcache.h"
#include "th_kv_connector.h"
#include "th_moe.h"
#include "th_router.h"
#include "th_scheduler.h"
#include "th_spec_decode.h"

#endif /* TOKENHOST_TOKENHOST_H */
