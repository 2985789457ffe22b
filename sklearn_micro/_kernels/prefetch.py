"""Asking the processor for memory before it is read: kernels whose reads land all over a
large array (the sampler's counts, the threshold ranking's items) ask for the data of a
step ahead while they work on the current one."""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """Ask the processor to bring ``array[index]`` into its caches (LLVM's prefetch, for
    a read with high locality); no effect on any value."""

    def codegen(context, builder, signature, args):
        values = context.make_array(array)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array, values, [args[1]])
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        builder.call(function, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0),
                                ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen
