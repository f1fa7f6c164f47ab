// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics
// Every error of the collective ops a user can hit.

func.func @indivisible(%g: tensor<6xf32>) -> tensor<1xf32> {
  // expected-error @+2 {{'graph.reduce_scatter_start' op scatters the first dimension over 4 ranks; it must be a multiple of 4, got 'tensor<6xf32>' (pad the input, or shard a dimension that divides)}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = graph.reduce_scatter_start %g {group = "dp", group_size = 4 : i64} : tensor<6xf32> -> tensor<1xf32>
  %r = graph.collective_wait %p : tensor<1xf32>
  return %r : tensor<1xf32>
}

// -----

func.func @size(%g: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error @+2 {{'graph.all_reduce_start' op group_size must be >= 1, got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = graph.all_reduce_start %g {group = "dp", group_size = 0 : i64} : tensor<6xf32> -> tensor<6xf32>
  return %p : tensor<6xf32>
}

// -----

func.func @unnamed(%g: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error @+2 {{'graph.all_reduce_start' op needs a process group name}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = graph.all_reduce_start %g {group = "", group_size = 2 : i64} : tensor<6xf32> -> tensor<6xf32>
  return %p : tensor<6xf32>
}

// -----

func.func @reduce(%g: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error @+2 {{'graph.all_reduce_start' op reduce must be "sum", "max" or "min", got "avg"}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = graph.all_reduce_start %g {group = "dp", group_size = 2 : i64, reduce = "avg"} : tensor<6xf32> -> tensor<6xf32>
  return %p : tensor<6xf32>
}

// -----

func.func @root(%g: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error @+2 {{'graph.broadcast_start' op root 2 is not a rank of a group of 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = graph.broadcast_start %g {group = "dp", group_size = 2 : i64, root = 2 : i64} : tensor<6xf32> -> tensor<6xf32>
  return %p : tensor<6xf32>
}

// -----

func.func @scalar(%g: tensor<f32>) -> tensor<2xf32> {
  // expected-error @+2 {{'graph.all_gather_start' op gathers along the first dimension; got 'tensor<f32>' (reshape a 0-d value to [1])}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = graph.all_gather_start %g {group = "dp", group_size = 2 : i64} : tensor<f32> -> tensor<2xf32>
  return %p : tensor<2xf32>
}

// -----

func.func @not_started(%g: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error @+1 {{'graph.collective_wait' op waits for a value no graph.*_start op gives}}
  %r = graph.collective_wait %g : tensor<6xf32>
  return %r : tensor<6xf32>
}

// -----

func.func @read_early(%g: tensor<6xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %p = graph.all_reduce_start %g {group = "dp", group_size = 2 : i64} : tensor<6xf32> -> tensor<6xf32>
  // expected-error @+1 {{'graph.collective_wait' op is not the only use of the pending value of graph.all_reduce_start; use the wait's result}}
  %r = graph.collective_wait %p : tensor<6xf32>
  return %r, %p : tensor<6xf32>, tensor<6xf32>
}
