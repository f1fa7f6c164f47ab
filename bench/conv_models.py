"""PyTorch models with convolutions for benchmarks and tests: a ResNet-style
stack, an MBConv (EfficientNet) stack, and WORKLOADS' unet_effnet: a U-Net
decoder on an EfficientNet-style encoder for 151-class segmentation with an
ignore label."""
import torch
import torch.nn as nn
import torch.nn.functional as TF

IGNORE = 255


def resnet_like(width=32):
    def block(ci, co, stride):
        return nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co),
                             nn.ReLU())
    return nn.Sequential(block(3, width, 2), nn.MaxPool2d(3, 2, 1), block(width, width, 1),
                         block(width, width, 1), block(width, 2 * width, 2),
                         block(2 * width, 2 * width, 1), block(2 * width, 4 * width, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, 10))


class MBConv(nn.Module):
    def __init__(self, c, expand=4):
        super().__init__()
        e = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(e, e, 3, 1, 1, groups=e, bias=False),
                                       nn.BatchNorm2d(e), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(e, c // 4, 1), nn.SiLU(),
                                nn.Conv2d(c // 4, e, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        h = self.depthwise(self.expand(x))
        return x + self.project(h * self.se(h))


def mbconv_like(width=24):
    return nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width),
                         nn.SiLU(), MBConv(width), MBConv(width), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(width, 10))



def _cbr(ci, co):
    return nn.Sequential(nn.Conv2d(ci, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU())


class UNetEffNet(nn.Module):
    """Encoder: stem conv (stride 2, BN, SiLU), then stages of MBConv blocks
    (1x1 expand, depthwise 3x3 with stride, squeeze-excite, SiLU, 1x1
    project, BN; residual where the shape allows) at 1/2, 1/4, 1/8 and 1/16
    of the input. Decoder: upsample x2 (bilinear), concatenate the skip,
    3x3 conv-BN-ReLU twice per level, back to full size, then a 1x1
    convolution to the classes."""

    def __init__(self, classes=151, widths=(16, 24, 40, 80)):
        super().__init__()
        w0 = widths[0]
        self.stem = nn.Sequential(nn.Conv2d(3, w0, 3, 2, 1, bias=False), nn.BatchNorm2d(w0),
                                  nn.SiLU())
        self.stages = nn.ModuleList()
        c = w0
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            self.stages.append(nn.Sequential(_MBConvDown(c, w, stride), MBConv(w)))
            c = w
        self.decoder = nn.ModuleList()
        for skip, w in zip(reversed(widths[:-1]), reversed(widths[:-1])):
            self.decoder.append(nn.Sequential(_cbr(c + skip, w), _cbr(w, w)))
            c = w
        self.last = nn.Sequential(_cbr(c, c), nn.Conv2d(c, classes, 1))

    def forward(self, x):
        size = x.shape[-2:]
        x = self.stem(x)
        skips = []
        for stage in self.stages:
            x = stage(x)
            skips.append(x)
        for block, skip in zip(self.decoder, reversed(skips[:-1])):
            x = TF.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skip], 1))
        x = TF.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return self.last(x)


class _MBConvDown(nn.Module):
    """MBConv changing width (and resolution with stride 2): no residual."""

    def __init__(self, ci, co, stride, expand=4):
        super().__init__()
        e = ci * expand
        self.body = nn.Sequential(
            nn.Conv2d(ci, e, 1, bias=False), nn.BatchNorm2d(e), nn.SiLU(),
            nn.Conv2d(e, e, 3, stride, 1, groups=e, bias=False), nn.BatchNorm2d(e), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(e, max(1, ci // 4), 1),
                                nn.SiLU(), nn.Conv2d(max(1, ci // 4), e, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(e, co, 1, bias=False), nn.BatchNorm2d(co))

    def forward(self, x):
        h = self.body(x)
        return self.project(h * self.se(h))


def unet_effnet(classes=151):
    return UNetEffNet(classes)


def segmentation_loss(model, x, y):
    """Pixelwise cross-entropy over the classes, IGNORE pixels left out."""
    return TF.cross_entropy(model(x), y, ignore_index=IGNORE)


def segmentation_batch(batch, size, classes=151, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, size, size, generator=g)
    y = torch.randint(0, classes, (batch, size, size), generator=g)
    y[:, :size // 8] = IGNORE  # a band of unlabelled pixels, as ADE20K has
    return x, y
