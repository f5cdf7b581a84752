// Umbrella header: the whole public C++ API.
#pragma once

#include "latte/api.hpp"
#include "latte/backend.hpp"
#include "latte/capabilities.hpp"
#include "latte/context.hpp"
#include "latte/device.hpp"
#include "latte/dtype.hpp"
#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"
#include "latte/policy.hpp"
#include "latte/registry.hpp"
#include "latte/selector.hpp"
#include "latte/spec.hpp"
#include "latte/tensor.hpp"
#include "latte/validate.hpp"
#include "latte/version.hpp"
