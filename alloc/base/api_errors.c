/* The counts behind api_errors.h, read by nic_get_stats. */
#include "api_errors.h"

struct nic_api_error_counts nic_api_errors;
