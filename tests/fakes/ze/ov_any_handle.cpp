// How a native handle from Python reaches an OpenVINO plugin that reads it as void* (the NPU plugin's
// MEM_HANDLE / L0_CONTEXT, the GPU plugin's MEM_HANDLE): Python's create_tensor(props) turns an int into an
// int64_t ov::Any and a str into a std::string ov::Any (pyopenvino utils.cpp py_object_to_any). This program,
// built against the openvino wheel's own headers and libopenvino, shows what as<void*>() does with each, and
// how a void* prints (what OVAny.astype(str) returns for get_params()["L0_CONTEXT"]).
#include <openvino/core/any.hpp>
#include <openvino/runtime/intel_npu/remote_properties.hpp>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

int main() {
    ov::Any from_str(std::string("0x7f00deadbeef"));
    std::printf("str_to_ptr=%p\n", from_str.as<void*>());
    ov::Any from_small(std::string("0x2a"));
    std::printf("small_str_to_ptr=%p\n", from_small.as<void*>());
    try {
        ov::Any from_int(static_cast<int64_t>(42));
        std::printf("int_to_ptr=%p\n", from_int.as<void*>());
    } catch (const std::exception& e) {
        std::string msg = e.what();
        for (auto& c : msg) if (c == '\n') c = ' ';
        std::printf("int_to_ptr_error=%s\n", msg.c_str());
    }
    ov::Any ptr(reinterpret_cast<void*>(0x1234abcd));
    std::printf("ptr_as_string=%s\n", ptr.as<std::string>().c_str());
    // CPU_VA as interop sends it (Python str values become std::string anys), read the way the NPU plugin's
    // RemoteContextImpl::create_tensor does: extract_object(params, p) = ov::Any(params.at(p.name())).as<Type>().
    ov::AnyMap params{{"MEM_TYPE", std::string("CPU_VA")}, {"MEM_HANDLE", std::string("0x7f0000001000")}};
    auto mt = ov::Any(params.at(ov::intel_npu::mem_type.name())).as<ov::intel_npu::MemType>();
    std::printf("cpu_va_mem_type=%d\n", static_cast<int>(mt));
    std::printf("cpu_va_is_cpu_va=%d\n", mt == ov::intel_npu::MemType::CPU_VA ? 1 : 0);
    std::printf("cpu_va_mem_handle=%p\n", ov::Any(params.at(ov::intel_npu::mem_handle.name())).as<void*>());
    std::printf("mem_type_name=%s mem_handle_name=%s\n", ov::intel_npu::mem_type.name(), ov::intel_npu::mem_handle.name());
    try {
        ov::AnyMap bad{{"MEM_TYPE", std::string("CPU_PTR")}};
        ov::Any(bad.at("MEM_TYPE")).as<ov::intel_npu::MemType>();
        std::printf("bad_mem_type=accepted\n");
    } catch (const std::exception& e) {
        std::printf("bad_mem_type=refused\n");
    }
    return 0;
}
