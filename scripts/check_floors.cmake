# The floors of docs/ARCHITECTURE.md ("Modules and dependency direction"),
# checked on the sources: each folder may include only the project folders on
# its own floor or below it. In particular the runtime includes no cost model
# header: it reads the plan, model, cluster and memory-category types of specs/.
#
#   include(scripts/check_floors.cmake)        # CMakeLists.txt: at configure time
#   planner_check_floors(<source root>)
#   cmake -DROOT=<source root> -P scripts/check_floors.cmake   # the `floors` test
#
# A configure-time check alone would miss an include added to a file that
# already exists (the globs rerun CMake only when files come or go), hence the
# test as well. planner_check_links checks the same for the CMake targets.

# folder -> the project folders its sources may include.
set(PLANNER_FLOORS
    "strategies:strategies"
    "specs:strategies,specs"
    "costmodel:strategies,specs,costmodel"
    "runtime:strategies,specs,runtime"
    "calibration:strategies,specs,costmodel,runtime,calibration"
    "planner:strategies,specs,costmodel,runtime,calibration,planner")
set(PLANNER_FLOOR_FOLDERS strategies specs costmodel runtime calibration planner)
# planner_core (planner/ less these) builds without LibTorch: only these
# programs' own files may include the runtime or calibration.
set(PLANNER_RUNTIME_USERS planner/main.cpp planner/cmd_exec.cpp planner/cmd_calibrate.cpp)

function(planner_check_floors root)
  set(errors "")
  foreach(rule IN LISTS PLANNER_FLOORS)
    string(REPLACE ":" ";" parts "${rule}")
    list(GET parts 0 folder)
    list(GET parts 1 allowed)
    string(REPLACE "," ";" allowed "${allowed}")
    file(GLOB_RECURSE files RELATIVE "${root}" "${root}/${folder}/*.cpp" "${root}/${folder}/*.hpp")
    foreach(f IN LISTS files)
      file(STRINGS "${root}/${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/")
      foreach(line IN LISTS lines)
        string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([a-z_]+)/.*" "\\1" dep "${line}")
        list(FIND PLANNER_FLOOR_FOLDERS "${dep}" is_project)
        if(is_project LESS 0)
          continue()  # not a project folder (a system or third-party path)
        endif()
        list(FIND allowed "${dep}" ok)
        if(folder STREQUAL "planner" AND (dep STREQUAL "runtime" OR dep STREQUAL "calibration"))
          list(FIND PLANNER_RUNTIME_USERS "${f}" ok)
        endif()
        if(ok LESS 0)
          string(STRIP "${line}" line)
          string(REPLACE ";" ", " may "${allowed}")
          string(APPEND errors "  ${f}: ${line} (${folder}/ may include only ${may})\n")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(errors)
    message(FATAL_ERROR "includes against the floors of docs/ARCHITECTURE.md:\n${errors}")
  endif()
endfunction()

# Fails when `target` links `forbidden`, directly or through the libraries it
# links (their LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES, transitively).
function(planner_check_links target forbidden)
  set(seen "")
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue t)
    if(NOT TARGET ${t} OR t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    if("${t}" STREQUAL "${forbidden}")
      message(FATAL_ERROR "${target} links ${forbidden}: the floors of docs/ARCHITECTURE.md forbid it")
    endif()
    get_target_property(direct ${t} LINK_LIBRARIES)
    get_target_property(iface ${t} INTERFACE_LINK_LIBRARIES)
    foreach(d IN LISTS direct iface)
      if(d AND TARGET ${d})
        list(APPEND queue ${d})
      endif()
    endforeach()
  endwhile()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED ROOT)
  planner_check_floors("${ROOT}")
  message(STATUS "floors: every folder's includes stay on its floor")
endif()
