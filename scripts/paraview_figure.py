"""Render docs/paraview.md's figure off-screen with VTK (the ``vtk`` wheel, EGL or OSMesa, no display):
python scripts/paraview_figure.py [OUTDIR].

Two VTKHDF files of the demo's field are written with ``ds.vdbflow.to_vtkhdf`` - Q on the plane z = pi
(ImageData) and velocity at random points in the data (PolyData) - and opened with VTK's own
``vtkHDFReader``, as ParaView opens them; the picture is what VTK draws of what it read.
"""

import sys
from pathlib import Path

import numpy as np
import vtk  # the vtk wheel: pip install vtk

from vdbflow import synthetic
from vdbflow.jobs.points import plane

out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/figures")
out.mkdir(parents=True, exist_ok=True)
vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=64)  # the demo's field: a spherical shell
pts = plane((0, 0, np.pi), (2 * np.pi, 0, 0), (0, 2 * np.pi, 0), (160, 160)).reshape(160, 160, 3)  # a lattice
vol.sample_grad(pts, outputs=["value", "jacobian", "q_criterion", "inside"]).vdbflow.to_vtkhdf(
    out / "q_plane.vtkhdf", overwrite=True
)
rng = np.random.default_rng(0)
ijk = vol.active_voxels()[rng.integers(0, vol.active_voxel_count, 20_000)]
scatter = vol.transform.apply(ijk + rng.uniform(-0.5, 0.5, ijk.shape))
vol.sample_grad(scatter[scatter[:, 2] < np.pi], outputs=["value", "vorticity_magnitude"]).vdbflow.to_vtkhdf(
    out / "points.vtkhdf", overwrite=True
)


def read(path: Path) -> vtk.vtkDataObject:
    reader = vtk.vtkHDFReader()
    reader.SetFileName(str(path))
    reader.Update()
    return reader.GetOutput()


renderer = vtk.vtkRenderer()
renderer.SetBackground(1, 1, 1)
image = read(out / "q_plane.vtkhdf")
image.GetPointData().SetActiveScalars("q_criterion")
lut = vtk.vtkColorTransferFunction()  # diverging: Q < 0 blue (strain), Q > 0 red (rotation)
for q, rgb in ((-1.0, (0.23, 0.30, 0.75)), (0.0, (0.87, 0.87, 0.87)), (1.0, (0.71, 0.02, 0.15))):
    lut.AddRGBPoint(q, *rgb)
plane_mapper = vtk.vtkDataSetMapper()
plane_mapper.SetInputData(image)
plane_mapper.SetLookupTable(lut)
plane_mapper.SetScalarRange(-1.0, 1.0)
plane_actor = vtk.vtkActor()
plane_actor.SetMapper(plane_mapper)
renderer.AddActor(plane_actor)
cloud = read(out / "points.vtkhdf")
cloud.GetPointData().SetActiveScalars("vorticity_magnitude")
cloud_mapper = vtk.vtkDataSetMapper()
cloud_mapper.SetInputData(cloud)
cloud_mapper.SetScalarRange(cloud.GetPointData().GetArray("vorticity_magnitude").GetRange())
cloud_actor = vtk.vtkActor()
cloud_actor.SetMapper(cloud_mapper)
cloud_actor.GetProperty().SetRepresentationToPoints()
cloud_actor.GetProperty().SetPointSize(2)
renderer.AddActor(cloud_actor)
bar = vtk.vtkScalarBarActor()
bar.SetLookupTable(plane_mapper.GetLookupTable())
bar.SetTitle("q_criterion [1/s^2]")
bar.GetTitleTextProperty().SetColor(0, 0, 0)
bar.GetLabelTextProperty().SetColor(0, 0, 0)
bar.SetNumberOfLabels(3)
bar.SetWidth(0.12)
renderer.AddViewProp(bar)
camera = renderer.GetActiveCamera()
camera.SetFocalPoint(np.pi, np.pi, np.pi * 0.8)
camera.SetPosition(np.pi + 9, np.pi - 8, np.pi + 8)
camera.SetViewUp(0, 0, 1)
renderer.ResetCameraClippingRange()
window = vtk.vtkRenderWindow()
window.SetOffScreenRendering(1)
window.AddRenderer(renderer)
window.SetSize(720, 540)
window.Render()
shot = vtk.vtkWindowToImageFilter()
shot.SetInput(window)
shot.Update()
png = vtk.vtkPNGWriter()
png.SetFileName(str(out / "paraview_q_plane.png"))
png.SetInputConnection(shot.GetOutputPort())
png.Write()
for name in ("q_plane.vtkhdf", "points.vtkhdf"):
    (out / name).unlink()
print("wrote", out / "paraview_q_plane.png")
