{
  "targets": [
    {
      "target_name": "tocsin",
      "sources": [
        "src/addon.cc",
        "src/core.c"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('better-sqlite3/package.json')), 'deps', 'sqlite3')\")",
        "core/include",
        "core/src"
      ],
      "defines": [
        "TOCSIN_EXTENSION",
        "TOCSIN_NODE_WORKER",
        "NAPI_VERSION=8",
        "NODE_ADDON_API_DISABLE_CPP_EXCEPTIONS",
        "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"
      ],
      "cflags": [
        "-std=c11",
        "-fvisibility=hidden",
        "-O2"
      ],
      "cflags_cc": [
        "-std=c++17",
        "-fvisibility=hidden",
        "-O2"
      ],
      "cflags!": [
        "-fno-exceptions"
      ],
      "cflags_cc!": [
        "-fno-exceptions",
        "-std=gnu++17"
      ],
      "libraries": [
        "-lpthread"
      ],
      "xcode_settings": {
        "GCC_SYMBOLS_PRIVATE_EXTERN": "YES",
        "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
        "MACOSX_DEPLOYMENT_TARGET": "10.15"
      },
      "conditions": [
        [
          "OS=='linux'",
          {
            "ldflags": [
              "-Wl,--version-script=<(module_root_dir)/src/exports.map"
            ]
          }
        ]
      ]
    }
  ]
}
